//! The gather kernel on a Vulkan device: strided views packed by a compute shader, for
//! elements of one and two words, ranks up to 4, and ranges that start off the device's
//! binding alignment. Skipped (and says why) without a Vulkan device.

use halcyon::{BufferParams, BufferView, ElementType, Timepoints};

#[test]
fn strided_views_are_gathered_by_the_device() {
    let device = match halcyon_vulkan::create_device(0) {
        Ok(device) => device,
        Err(e) => return eprintln!("skipped: no vulkan://0: {e}"),
    };
    assert!(device.gathers_on_device(), "the gather kernel did not load");
    let queue = device.queue(0).unwrap();
    futures::executor::block_on(async {
        // u64 elements (two words each), rank 3, a view starting 8 bytes into its buffer.
        let data: Vec<u64> = (0..60).map(|i| i * 1_000_000_007).collect();
        let buffer = device
            .allocator()
            .allocate(8 + 480, BufferParams::HOST)
            .unwrap();
        let range = buffer.slice(8..488).unwrap();
        queue
            .write(Timepoints::default(), &data, &range)
            .await
            .unwrap();
        let x = BufferView::new(range, ElementType::U64, &[3, 4, 5]).unwrap();
        for (name, view) in [
            ("permuted", x.permute(&[2, 0, 1]).unwrap()),
            ("sliced", x.slice(2, 1..4).unwrap().transpose(0, 1).unwrap()),
            (
                "rank 4",
                x.reshape(&[3, 2, 2, 5])
                    .unwrap()
                    .permute(&[3, 2, 1, 0])
                    .unwrap(),
            ),
        ] {
            let expected: Vec<u64> = view.to_host(&queue, Timepoints::default()).await.unwrap();
            let bytes = 8 * view.len();
            let out = device
                .allocator()
                .allocate(bytes + 4, BufferParams::DEVICE)
                .unwrap();
            // A target starting one word in: also off the binding alignment.
            let target = BufferView::new(
                out.slice(4..4 + bytes).unwrap(),
                ElementType::U64,
                view.shape(),
            );
            // u64 views must start at a multiple of 8: this one is refused, then one at 0.
            assert!(target.is_err());
            let target =
                BufferView::new(out.slice(0..bytes).unwrap(), ElementType::U64, view.shape())
                    .unwrap();
            queue
                .copy_view(Timepoints::default(), &view, &target)
                .await
                .unwrap();
            let got: Vec<u64> = target.to_host(&queue, Timepoints::default()).await.unwrap();
            assert_eq!(got, expected, "{name}");
        }
        // f32 (one word) from a range off the alignment, into one off it too.
        let floats: Vec<f32> = (0..24).map(|i| i as f32).collect();
        let buffer = device
            .allocator()
            .allocate(4 + 96, BufferParams::HOST)
            .unwrap();
        let range = buffer.slice(4..100).unwrap();
        queue
            .write(Timepoints::default(), &floats, &range)
            .await
            .unwrap();
        let x = BufferView::new(range, ElementType::F32, &[4, 6]).unwrap();
        let out = device
            .allocator()
            .allocate(4 + 96, BufferParams::DEVICE)
            .unwrap();
        let target =
            BufferView::new(out.slice(4..100).unwrap(), ElementType::F32, &[6, 4]).unwrap();
        queue
            .copy_view(Timepoints::default(), &x.transpose(0, 1).unwrap(), &target)
            .await
            .unwrap();
        let got: Vec<f32> = target.to_host(&queue, Timepoints::default()).await.unwrap();
        let expected: Vec<f32> = (0..6)
            .flat_map(|c| (0..4).map(move |r| (r * 6 + c) as f32))
            .collect();
        assert_eq!(got, expected);
    });
}
