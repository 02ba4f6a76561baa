//! Buffer views: reading back and moving views of any layout, on one device and between two.

use halcyon::{BufferParams, BufferView, Device, ElementType, Result, StatusCode, Timepoints};

use crate::harness::block_on;
use crate::kernels::Kernels;

/// The 3 × 4 matrix `10 * row + column` as f32s.
fn matrix() -> Vec<f32> {
    (0..3)
        .flat_map(|r| (0..4).map(move |c| (10 * r + c) as f32))
        .collect()
}

/// A 3 × 4 f32 view uploaded with `BufferView::from_host` reads back whole, as a slice of
/// rows (contiguous), a column (strided) and its transpose (strided), each in row-major order
/// of its own shape. Moving it (`BufferView::to`) from queue 0 to the device's last queue
/// gives new contiguous views with the same elements, for the whole view and for the
/// transpose (whose elements are picked out on the host). Reading it as another type, and
/// reshaping the transpose without a copy, are refused with the reason; `reshaped` copies the
/// transpose where merging its axes needs it, and not where splitting one does not. Needs no
/// kernels.
pub fn buffer_views_read_back_and_move(device: &Device, _: &dyn Kernels) -> Result<()> {
    let queue = device.queue(0)?;
    let last = device.queue(device.queue_count() - 1)?;
    let data = matrix();
    block_on(async {
        let (x, uploaded) = BufferView::from_host(&queue, Timepoints::default(), &data, &[3, 4])?;
        uploaded.await?;
        assert_eq!(
            (x.element(), x.shape(), x.byte_len()),
            (ElementType::F32, &[3u64, 4][..], 48)
        );
        let whole: Vec<f32> = x.to_host(&queue, Timepoints::default()).await?;
        assert_eq!(whole, data);
        let rows: Vec<f32> = x
            .slice(0, 1..3)?
            .to_host(&queue, Timepoints::default())
            .await?;
        assert_eq!(rows, data[4..]);
        let column = x.slice(1, 2..3)?;
        assert!(!column.is_contiguous());
        let column: Vec<f32> = column.to_host(&queue, Timepoints::default()).await?;
        assert_eq!(column, [2.0, 12.0, 22.0]);
        let t = x.transpose(0, 1)?;
        let expected: Vec<f32> = (0..4)
            .flat_map(|c| (0..3).map(move |r| (10 * r + c) as f32))
            .collect();
        let transposed: Vec<f32> = t.to_host(&queue, Timepoints::default()).await?;
        assert_eq!(transposed, expected);

        let (moved, done) = x.to(&queue, &last, Timepoints::default())?;
        done.await?;
        assert!(!moved.buffer().ptr_eq(x.buffer()));
        let moved: Vec<f32> = moved.to_host(&last, Timepoints::default()).await?;
        assert_eq!(moved, data);
        let (moved, done) = t.to(&queue, &last, Timepoints::default())?;
        done.await?;
        assert!(moved.is_contiguous());
        assert_eq!(moved.shape(), &[4, 3]);
        let moved: Vec<f32> = moved.to_host(&last, Timepoints::default()).await?;
        assert_eq!(moved, expected);

        let wrong = x.to_host::<i32>(&queue, Timepoints::default()).await;
        assert_eq!(wrong.unwrap_err().code(), StatusCode::InvalidArgument);
        let error = t.reshape(&[12]).unwrap_err();
        assert_eq!(error.code(), StatusCode::FailedPrecondition, "{error}");
        // `reshaped` copies the transpose, and only it.
        let (flat, copied) = t.reshaped(&queue, Timepoints::default(), &[12])?;
        copied.await?;
        assert!(flat.is_contiguous() && !flat.buffer().ptr_eq(t.buffer()));
        let got: Vec<f32> = flat.to_host(&queue, Timepoints::default()).await?;
        let expected: Vec<f32> = (0..4)
            .flat_map(|c| (0..3).map(move |r| (10 * r + c) as f32))
            .collect();
        assert_eq!(got, expected);
        let (split, ready) = t.reshaped(&queue, Timepoints::default(), &[2, 2, 3])?;
        ready.await?;
        assert!(
            split.buffer().ptr_eq(t.buffer()),
            "splitting an axis needs no copy"
        );
        let got: Vec<f32> = split.to_host(&queue, Timepoints::default()).await?;
        assert_eq!(got, expected);
        let wrong = t.reshaped(&queue, Timepoints::default(), &[5]);
        assert_eq!(
            wrong.err().map(|e| e.code()),
            Some(StatusCode::InvalidArgument)
        );
        let bits: Vec<u16> = vec![0x3c00; 6];
        let (halves, done) = BufferView::from_host_as(
            &queue,
            Timepoints::default(),
            ElementType::F16,
            &bits,
            &[2, 3],
        )?;
        done.await?;
        let back: Vec<u16> = halves
            .transpose(0, 1)?
            .to_host_as(&queue, Timepoints::default())
            .await?;
        assert_eq!(back, bits);
        Ok(())
    })
}

/// A view moved from device A to device B (`BufferView::to`), whole and transposed, arrives
/// with its elements in row-major order of its shape, as a contiguous view on B. Needs no
/// kernels.
pub fn buffer_views_move_between_devices(a: Device, b: Device, _: &dyn Kernels) -> Result<()> {
    let (qa, qb) = (a.queue(0)?, b.queue(0)?);
    let data: Vec<i32> = (0..24).map(|i| i * 3 - 7).collect();
    block_on(async {
        let (x, uploaded) = BufferView::from_host(&qa, Timepoints::default(), &data, &[2, 3, 4])?;
        uploaded.await?;
        let (on_b, moved) = x.to(&qa, &qb, Timepoints::default())?;
        moved.await?;
        let back: Vec<i32> = on_b.to_host(&qb, Timepoints::default()).await?;
        assert_eq!(back, data);
        let permuted = x.permute(&[2, 0, 1])?;
        let expected: Vec<i32> = {
            let mut v = Vec::new();
            for k in 0..4 {
                for i in 0..2 {
                    for j in 0..3 {
                        v.push(data[i * 12 + j * 4 + k]);
                    }
                }
            }
            v
        };
        let (on_b, moved) = permuted.to(&qa, &qb, Timepoints::default())?;
        moved.await?;
        assert_eq!(on_b.shape(), &[4, 2, 3]);
        let back: Vec<i32> = on_b.to_host(&qb, Timepoints::default()).await?;
        assert_eq!(back, expected);
        Ok(())
    })
}

/// `Queue::copy_view` packs a strided view (a transpose, a column, every other row) into a
/// contiguous one of the same shape on the device, whichever way the backend does it (its
/// own gather, its gather kernel, or the host between staging copies: no host step takes part
/// exactly where `Device::gathers_on_device` says so); a contiguous source is one copy. Views
/// of other types or shapes, a strided target, and views whose bytes overlap are refused
/// with `InvalidArgument`. Needs no kernels.
pub fn copy_view_packs_strided_views(device: &Device, _: &dyn Kernels) -> Result<()> {
    let queue = device.queue(0)?;
    let data: Vec<u32> = (0..48).collect();
    block_on(async {
        let (x, up) = BufferView::from_host(&queue, Timepoints::default(), &data, &[4, 12])?;
        up.await?;
        let fresh = |shape: &[u64]| -> Result<BufferView> {
            let bytes = 4 * shape.iter().product::<u64>();
            let buffer = device
                .allocator()
                .allocate(bytes, halcyon::BufferParams::DEVICE)?;
            BufferView::new(buffer.whole(), ElementType::U32, shape)
        };
        let every_other_row =
            BufferView::with_strides(x.range().clone(), ElementType::U32, &[2, 12], &[24, 1], 12)?;
        // Where the device packs views itself, no host step takes part.
        let t = x.transpose(0, 1)?;
        let packed = fresh(t.shape())?;
        let (copied, operations) = profiled(device, || {
            queue.copy_view(Timepoints::default(), &t, &packed)
        })
        .await;
        copied?;
        let host_steps = (operations.iter())
            .filter(|o| o.kind == halcyon::profile::OperationKind::HostCall)
            .count();
        assert_eq!(
            host_steps == 0,
            device.gathers_on_device(),
            "{host_steps} host steps, on a device that says gathers_on_device() = {}",
            device.gathers_on_device()
        );
        for (name, view) in [
            ("transpose", x.transpose(0, 1)?),
            ("column", x.slice(1, 5..6)?),
            ("every other row", every_other_row),
            ("whole", x.clone()),
        ] {
            let expected: Vec<u32> = view.to_host(&queue, Timepoints::default()).await?;
            let packed = fresh(view.shape())?;
            queue
                .copy_view(Timepoints::default(), &view, &packed)
                .await?;
            let got: Vec<u32> = packed.to_host(&queue, Timepoints::default()).await?;
            assert_eq!(got, expected, "{name}");
        }
        let refused = [
            (x.transpose(0, 1)?, fresh(&[4, 12])?, "shape"),
            (x.clone(), fresh(&[12, 4])?.transpose(0, 1)?, "strided"),
            (x.slice(0, 0..2)?, x.slice(0, 1..3)?, "overlap"),
        ];
        for (source, target, why) in refused {
            let error = queue
                .copy_view(Timepoints::default(), &source, &target)
                .await
                .unwrap_err();
            assert_eq!(error.code(), StatusCode::InvalidArgument, "{why}: {error}");
        }
        Ok(())
    })
}

/// On a device that packs views itself (`Device::gathers_on_device`, which must say so), a
/// strided view's elements are gathered right, by the device: elements of 1, 2, 4 and 8
/// bytes; ranks 2 to 6 (over 4 once merged takes several launches of a kernel); ranges that
/// start off the device's binding alignment and off a word; 1- and 2-byte targets whose
/// first and last words they share with bytes around them, which keep their values. Each
/// copy must be one operation of the device (a host round trip is three). A range of 2-byte
/// elements ending off a word at its buffer's end is still copied right (on the host). A
/// column read back is packed on the device first, and only its bytes read. For
/// backends with a gather kernel or native gathers; not in the generic lists, since others
/// gather on the host.
pub fn strided_views_gathered_on_device(device: &Device) {
    assert!(device.gathers_on_device(), "the gather kernel did not load");
    let queue = device.queue(0).unwrap();
    block_on(async {
        // u64 elements (two words each), rank 3, a view starting 8 bytes into its buffer.
        let data: Vec<u64> = (0..60).map(|i| i * 1_000_000_007).collect();
        let x = uploaded(device, &queue, &data, 8, ElementType::U64, &[3, 4, 5]).await;
        gather_checked(
            device,
            &queue,
            &x.permute(&[2, 0, 1])?,
            &data,
            0,
            "u64 permuted",
        )
        .await;
        let sliced = x.slice(2, 1..4)?.transpose(0, 1)?;
        gather_checked(device, &queue, &sliced, &data, 8, "u64 sliced").await;
        let rank4 = x.reshape(&[3, 2, 2, 5])?.permute(&[3, 2, 1, 0])?;
        gather_checked(device, &queue, &rank4, &data, 0, "u64 rank 4").await;
        // u64 views must start at a multiple of 8.
        let out = device.allocator().allocate(64, BufferParams::DEVICE)?;
        assert!(BufferView::new(out.slice(4..36)?, ElementType::U64, &[4]).is_err());

        // f32 (one word) from a range off the alignment, into one off it too.
        let floats: Vec<f32> = (0..24).map(|i| i as f32).collect();
        let x = uploaded(device, &queue, &floats, 4, ElementType::F32, &[4, 6]).await;
        gather_checked(device, &queue, &x.transpose(0, 1)?, &floats, 4, "f32").await;

        // Halfwords (u16, and f16 as its bits): an odd count from byte 2, into byte 2 on.
        let halves: Vec<u16> = (0..35).map(|i| 0x8000 | (i * 37)).collect();
        let x = uploaded(device, &queue, &halves, 2, ElementType::U16, &[5, 7]).await;
        gather_checked(device, &queue, &x.transpose(0, 1)?, &halves, 2, "u16").await;
        let x = uploaded(device, &queue, &halves, 6, ElementType::U16, &[7, 5]).await;
        gather_checked(device, &queue, &x.slice(1, 1..4)?, &halves, 6, "u16 sliced").await;

        // Bytes (u8; bool and i8 are the same size): rank 3 from byte 1, into byte 3 on.
        let bytes: Vec<u8> = (0..105).map(|i| (i * 7 + 3) as u8).collect();
        let x = uploaded(device, &queue, &bytes, 1, ElementType::U8, &[3, 5, 7]).await;
        gather_checked(device, &queue, &x.permute(&[2, 0, 1])?, &bytes, 3, "u8").await;

        // Last two axes multiples of 8 (kernels may take them in 8 × 8 tiles): transposes of
        // u32 and u16, and of the last two axes of a rank-3 u8 view.
        let square: Vec<u32> = (0..64).map(|i| i * 11 + 2).collect();
        let x = uploaded(device, &queue, &square, 0, ElementType::U32, &[8, 8]).await;
        gather_checked(device, &queue, &x.transpose(0, 1)?, &square, 4, "u32 8 × 8").await;
        let tiles: Vec<u16> = (0..384).map(|i| i * 3 + 7).collect();
        let x = uploaded(device, &queue, &tiles, 2, ElementType::U16, &[16, 24]).await;
        let xt = x.transpose(0, 1)?;
        gather_checked(device, &queue, &xt, &tiles, 0, "u16 24 × 16").await;
        gather_checked(device, &queue, &xt, &tiles, 2, "u16 24 × 16 off a word").await;
        // A column spans 361 elements for 16: `to_host` packs it on the device, then reads
        // only it (two operations; the host path reads the span in one).
        let column = x.slice(1, 3..4)?;
        let (got, operations) = profiled(device, || {
            column.to_host::<u16>(&queue, Timepoints::default())
        })
        .await;
        let got = got?;
        let expected: Vec<u16> = (0..16).map(|r| tiles[r * 24 + 3]).collect();
        assert_eq!(got, expected, "a column read back");
        let kinds: Vec<_> = operations.iter().map(|o| o.kind).collect();
        assert_eq!(kinds.len(), 2, "{kinds:?}");
        assert_eq!(kinds[1], halcyon::profile::OperationKind::Read, "{kinds:?}");
        assert_eq!(operations[1].bytes, 32, "only the column is read");
        let tiles: Vec<u8> = (0..768).map(|i| (i * 5 + 1) as u8).collect();
        let x = uploaded(device, &queue, &tiles, 3, ElementType::U8, &[3, 16, 16]).await;
        let permuted = x.permute(&[0, 2, 1])?;
        gather_checked(device, &queue, &permuted, &tiles, 4, "u8 3 × 16 × 16").await;
        let name = "u8 3 × 16 × 16 off a word";
        gather_checked(device, &queue, &permuted, &tiles, 1, name).await;

        // Ranks past 4 that no axes merge away: 2 launches of u32, 9 of u16.
        let words: Vec<u32> = (0..72).map(|i| i * 3 + 1).collect();
        let x = uploaded(
            device,
            &queue,
            &words,
            0,
            ElementType::U32,
            &[2, 3, 2, 3, 2],
        )
        .await;
        let rank5 = x.permute(&[4, 2, 0, 3, 1])?;
        gather_checked(device, &queue, &rank5, &words, 0, "u32 rank 5").await;
        let halves: Vec<u16> = (0..144).map(|i| i * 5 + 1).collect();
        let x = uploaded(
            device,
            &queue,
            &halves,
            2,
            ElementType::U16,
            &[2, 2, 2, 2, 3, 3],
        )
        .await;
        let rank6 = x.permute(&[5, 4, 3, 2, 1, 0])?;
        gather_checked(device, &queue, &rank6, &halves, 2, "u16 rank 6").await;

        // 2-byte elements ending off a word at the buffer's end: gathered on the host, right.
        let buffer = device.allocator().allocate(30, BufferParams::HOST)?;
        let range = buffer.slice(0..30)?;
        queue
            .write(Timepoints::default(), &halves[..15], &range)
            .await?;
        let x = BufferView::new(range, ElementType::U16, &[3, 5])?.transpose(0, 1)?;
        let out = device.allocator().allocate(30, BufferParams::DEVICE)?;
        let target = BufferView::new(out.slice(0..30)?, ElementType::U16, &[5, 3])?;
        queue.copy_view(Timepoints::default(), &x, &target).await?;
        let got: Vec<u16> = target.to_host(&queue, Timepoints::default()).await?;
        let expected: Vec<u16> = x.layout().offsets().map(|o| halves[o as usize]).collect();
        assert_eq!(got, expected, "u16 at the buffer's end");

        // Buffers a kernel may not bind (no DISPATCH_STORAGE): copied, read and moved right
        // all the same (on the host where a kernel would gather).
        let transfer_only = BufferParams {
            usage: halcyon::BufferUsage::TRANSFER,
            ..BufferParams::DEVICE
        };
        let buffer = device.allocator().allocate(256, transfer_only)?;
        queue
            .write(Timepoints::default(), &square, &buffer.whole())
            .await?;
        let x = BufferView::new(buffer.whole(), ElementType::U32, &[8, 8])?;
        let (xt, column) = (x.transpose(0, 1)?, x.slice(1, 5..6)?);
        let expected: Vec<u32> = xt.layout().offsets().map(|o| square[o as usize]).collect();
        let out = device.allocator().allocate(256, transfer_only)?;
        let target = BufferView::new(out.whole(), ElementType::U32, &[8, 8])?;
        queue.copy_view(Timepoints::default(), &xt, &target).await?;
        let got: Vec<u32> = target.to_host(&queue, Timepoints::default()).await?;
        assert_eq!(got, expected, "a transpose without DISPATCH_STORAGE");
        let (moved, done) = xt.to(&queue, &queue, Timepoints::default())?;
        done.await?;
        let got: Vec<u32> = moved.to_host(&queue, Timepoints::default()).await?;
        assert_eq!(got, expected, "a transpose without DISPATCH_STORAGE, moved");
        let got: Vec<u32> = column.to_host(&queue, Timepoints::default()).await?;
        let expected: Vec<u32> = (0..8).map(|r| square[r * 8 + 5]).collect();
        assert_eq!(got, expected, "a column without DISPATCH_STORAGE");
        Ok::<_, halcyon::Error>(())
    })
    .expect("the gathers ran");
}

/// Submits `work` with `device`'s profiler on, awaits it, and returns its output with the
/// operations submitted meanwhile.
async fn profiled<F: std::future::Future>(
    device: &Device,
    work: impl FnOnce() -> F,
) -> (F::Output, Vec<halcyon::profile::Operation>) {
    let profiler = device.profiler();
    profiler.enable();
    drop(profiler.take());
    let output = work().await;
    let operations = profiler.take().operations;
    profiler.disable();
    (output, operations)
}

/// `data` written `at` bytes into a new host-visible buffer (which ends on a word), as a
/// contiguous view of `shape`.
async fn uploaded<T: bytemuck::Pod>(
    device: &Device,
    queue: &halcyon::Queue,
    data: &[T],
    at: u64,
    element: ElementType,
    shape: &[u64],
) -> BufferView {
    let bytes = std::mem::size_of_val(data) as u64;
    let buffer = device
        .allocator()
        .allocate((at + bytes).next_multiple_of(4), BufferParams::HOST)
        .unwrap();
    let range = buffer.slice(at..at + bytes).unwrap();
    queue
        .write(Timepoints::default(), data, &range)
        .await
        .unwrap();
    BufferView::new(range, element, shape).unwrap()
}

/// Copies `view` (whose range holds `data`) into a contiguous view `at` bytes into a buffer
/// of 0xA5 bytes, and checks: the elements are `data`'s at the view's offsets in row-major
/// order; every byte around the target is still 0xA5; and the profile holds one operation
/// for the copy (a host round trip is a copy, a host step and a barrier).
async fn gather_checked<T>(
    device: &Device,
    queue: &halcyon::Queue,
    view: &BufferView,
    data: &[T],
    at: u64,
    name: &str,
) where
    T: halcyon::Element + PartialEq + std::fmt::Debug,
{
    let size = view.element().size();
    let bytes = size * view.len();
    let len = (at + bytes + 4).next_multiple_of(4);
    let out = device
        .allocator()
        .allocate(len, BufferParams::DEVICE)
        .unwrap();
    let whole = out.slice(0..len).unwrap();
    queue
        .fill(Timepoints::default(), 0xA5A5_A5A5u32, &whole)
        .await
        .unwrap();
    let target = BufferView::new(
        out.slice(at..at + bytes).unwrap(),
        view.element(),
        view.shape(),
    )
    .unwrap();
    let (copied, operations) = profiled(device, || {
        queue.copy_view(Timepoints::default(), view, &target)
    })
    .await;
    copied.unwrap_or_else(|e| panic!("{name}: {e}"));
    assert_eq!(
        operations.len(),
        1,
        "{name}: the copy took {:?}, not one operation of the device",
        operations.iter().map(|o| &o.name).collect::<Vec<_>>()
    );
    let got: Vec<T> = target.to_host(queue, Timepoints::default()).await.unwrap();
    let expected: Vec<T> = view.layout().offsets().map(|o| data[o as usize]).collect();
    assert_eq!(got, expected, "{name}");
    let around: Vec<u8> = BufferView::new(whole, ElementType::U8, &[len])
        .unwrap()
        .to_host(queue, Timepoints::default())
        .await
        .unwrap();
    let outside = (0..len as usize).filter(|&b| (b as u64) < at || b as u64 >= at + bytes);
    for b in outside {
        assert_eq!(
            around[b], 0xA5,
            "{name}: byte {b}, outside the target, changed"
        );
    }
}
