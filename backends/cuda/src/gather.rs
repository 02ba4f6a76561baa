//! The gather kernel: PTX that packs a strided view's elements, which the core dispatches for
//! `Queue::copy_view` (see `halcyon::backend::DeviceBackend::gather_kernel` for its bindings
//! and constants). Checked like any PTX module: its `.param` list is the signature of two
//! bindings and sixteen constants.
//!
//! Hand-written (there is no CUDA C source to keep in step), in PTX ISA 8.0 for `sm_52`, the
//! oldest every supported driver JITs: one thread per element, which unravels its index over
//! the shape (rank 4, leading axes of 1) with `div`/`rem`, sums index × stride, and copies the
//! element: word by word, or with one byte or halfword load and store for 1- and 2-byte
//! elements (PTX addresses bytes, so neighbours sharing a word never touch each other's). If a driver refused it, loading fails and the device gathers on the host
//! instead (`Device::gathers_on_device` says so).

use halcyon::{EntryPoint, ExecutableSpec};

use crate::module::CudaModule;

/// The kernel's entry point: 64 threads per block, two bindings, sixteen constants.
fn entry_point() -> EntryPoint {
    EntryPoint {
        name: halcyon::device::GATHER_ENTRY_POINT.into(),
        workgroup_size: [64, 1, 1],
        binding_count: 2,
        constant_count: 16,
    }
}

/// The module, as a checked spec.
pub(crate) fn spec() -> ExecutableSpec {
    CudaModule::ptx(GATHER_PTX, vec![entry_point()]).spec()
}

/// The PTX.
const GATHER_PTX: &str = r#"
.version 8.0
.target sm_52
.address_size 64

.visible .entry halcyon_gather(
	.param .u64 halcyon_gather_param_0,
	.param .u64 halcyon_gather_param_1,
	.param .u32 halcyon_gather_param_2,
	.param .u32 halcyon_gather_param_3,
	.param .u32 halcyon_gather_param_4,
	.param .u32 halcyon_gather_param_5,
	.param .u32 halcyon_gather_param_6,
	.param .u32 halcyon_gather_param_7,
	.param .u32 halcyon_gather_param_8,
	.param .u32 halcyon_gather_param_9,
	.param .u32 halcyon_gather_param_10,
	.param .u32 halcyon_gather_param_11,
	.param .u32 halcyon_gather_param_12,
	.param .u32 halcyon_gather_param_13,
	.param .u32 halcyon_gather_param_14,
	.param .u32 halcyon_gather_param_15,
	.param .u32 halcyon_gather_param_16,
	.param .u32 halcyon_gather_param_17
)
{
	.reg .pred 	%p<5>;
	.reg .b16 	%rs<2>;
	.reg .b32 	%r<40>;
	.reg .b64 	%rd<10>;

	// i = ctaid.y * row + ctaid.x * ntid.x + tid.x
	mov.u32 	%r1, %ctaid.x;
	mov.u32 	%r2, %ntid.x;
	mov.u32 	%r3, %tid.x;
	mad.lo.s32 	%r4, %r1, %r2, %r3;
	mov.u32 	%r5, %ctaid.y;
	ld.param.u32 	%r6, [halcyon_gather_param_14];
	mad.lo.s32 	%r7, %r5, %r6, %r4;
	ld.param.u32 	%r8, [halcyon_gather_param_12];
	setp.ge.u32 	%p1, %r7, %r8;
	@%p1 bra 	$L_done;

	// at = sum over k = 3..0 of (rest % shape_k) * stride_k; rest /= shape_k
	ld.param.u32 	%r10, [halcyon_gather_param_5];
	ld.param.u32 	%r11, [halcyon_gather_param_9];
	rem.u32 	%r12, %r7, %r10;
	div.u32 	%r13, %r7, %r10;
	mul.lo.s32 	%r14, %r12, %r11;
	ld.param.u32 	%r15, [halcyon_gather_param_4];
	ld.param.u32 	%r16, [halcyon_gather_param_8];
	rem.u32 	%r17, %r13, %r15;
	div.u32 	%r18, %r13, %r15;
	mad.lo.s32 	%r14, %r17, %r16, %r14;
	ld.param.u32 	%r19, [halcyon_gather_param_3];
	ld.param.u32 	%r20, [halcyon_gather_param_7];
	rem.u32 	%r21, %r18, %r19;
	div.u32 	%r22, %r18, %r19;
	mad.lo.s32 	%r14, %r21, %r20, %r14;
	ld.param.u32 	%r23, [halcyon_gather_param_2];
	ld.param.u32 	%r24, [halcyon_gather_param_6];
	rem.u32 	%r25, %r22, %r23;
	mad.lo.s32 	%r14, %r25, %r24, %r14;

	// Byte addresses: binding + 4 * first word + first byte + place * size.
	ld.param.u32 	%r26, [halcyon_gather_param_13];
	ld.param.u32 	%r27, [halcyon_gather_param_10];
	ld.param.u32 	%r28, [halcyon_gather_param_11];
	ld.param.u32 	%r29, [halcyon_gather_param_15];
	ld.param.u32 	%r30, [halcyon_gather_param_16];
	ld.param.u64 	%rd1, [halcyon_gather_param_0];
	ld.param.u64 	%rd2, [halcyon_gather_param_1];
	cvta.to.global.u64 	%rd3, %rd1;
	cvta.to.global.u64 	%rd4, %rd2;
	mul.wide.u32 	%rd5, %r27, 4;
	add.s64 	%rd3, %rd3, %rd5;
	cvt.u64.u32 	%rd5, %r29;
	add.s64 	%rd3, %rd3, %rd5;
	mul.wide.u32 	%rd5, %r14, %r26;
	add.s64 	%rd3, %rd3, %rd5;
	mul.wide.u32 	%rd5, %r28, 4;
	add.s64 	%rd4, %rd4, %rd5;
	cvt.u64.u32 	%rd5, %r30;
	add.s64 	%rd4, %rd4, %rd5;
	mul.wide.u32 	%rd5, %r7, %r26;
	add.s64 	%rd4, %rd4, %rd5;
	setp.eq.u32 	%p2, %r26, 1;
	@%p2 bra 	$L_byte;
	setp.eq.u32 	%p3, %r26, 2;
	@%p3 bra 	$L_half;
	mov.u32 	%r31, 0;
$L_word:
	setp.ge.u32 	%p4, %r31, %r26;
	@%p4 bra 	$L_done;
	cvt.u64.u32 	%rd6, %r31;
	add.s64 	%rd7, %rd3, %rd6;
	ld.global.u32 	%r33, [%rd7];
	add.s64 	%rd8, %rd4, %rd6;
	st.global.u32 	[%rd8], %r33;
	add.s32 	%r31, %r31, 4;
	bra.uni 	$L_word;
$L_byte:
	ld.global.u8 	%rs1, [%rd3];
	st.global.u8 	[%rd4], %rs1;
	bra.uni 	$L_done;
$L_half:
	ld.global.u16 	%rs1, [%rd3];
	st.global.u16 	[%rd4], %rs1;

$L_done:
	ret;
}
"#;

#[cfg(test)]
mod tests {
    use super::GATHER_PTX;

    /// The PTX assembles with NVIDIA's `ptxas` (`$PTXAS`, or on `PATH`, as the checked-in
    /// PTX's test in `tests/cuda.rs` finds it; `scripts/ptxas.sh` fetches one and runs both)
    /// for `sm_52`, the target it declares, and `sm_90`: what a driver's JIT checks, without
    /// a GPU. An architecture this ptxas no longer targets (CUDA 13 dropped `sm_52`) is
    /// skipped, but one must assemble. Skipped, saying so, without ptxas.
    #[test]
    fn the_gather_ptx_assembles_with_ptxas() {
        let ptxas = std::env::var("PTXAS").unwrap_or_else(|_| "ptxas".into());
        let dir = std::env::temp_dir().join(format!("halcyon-ptxas-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let source = dir.join("gather.ptx");
        std::fs::write(&source, GATHER_PTX).unwrap();
        let mut assembled = 0;
        for arch in ["sm_52", "sm_90"] {
            let out = std::process::Command::new(&ptxas)
                .arg(format!("-arch={arch}"))
                .arg("-v")
                .arg(&source)
                .arg("-o")
                .arg(dir.join(format!("gather-{arch}.cubin")))
                .output();
            let out = match out {
                Ok(out) => out,
                Err(e) => {
                    std::fs::remove_dir_all(&dir).unwrap();
                    return eprintln!("skipped: cannot run {ptxas}: {e}");
                }
            };
            let log = String::from_utf8_lossy(&out.stderr);
            if !out.status.success() && log.contains("is not defined for option 'gpu-name'") {
                eprintln!("skipped {arch}: this ptxas no longer targets it");
                continue;
            }
            assert!(
                out.status.success(),
                "ptxas -arch={arch} refused the gather PTX:\n{log}"
            );
            eprintln!(
                "ptxas -arch={arch}: {}",
                log.lines().last().unwrap_or_default()
            );
            assembled += 1;
        }
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(
            assembled > 0,
            "{ptxas} assembled the gather PTX for no architecture"
        );
    }
}
