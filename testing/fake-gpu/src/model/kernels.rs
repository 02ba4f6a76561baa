//! Modules and kernels: PTX read for its entry points and parameters, and the kernels the fake
//! can run natively (halcyon's standard kernels, matched by name and parameter sizes).

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use cudarc::driver::sys::CUresult;

use crate::model::contract::{lock, sticky};
use crate::model::driver::KERNELS_RUN;
use crate::model::memory::memory;

/// A loaded module.
pub(crate) struct Module {
    pub kernels: Vec<Arc<Kernel>>,
}

/// One entry point of a module.
pub(crate) struct Kernel {
    /// Its `CUfunction` handle.
    pub function: u64,
    pub name: String,
    /// `(offset, size)` of each parameter, as `cuFuncGetParamInfo` reports them.
    pub params: Vec<(usize, usize)>,
    /// The most threads a block launching it may have
    /// (`CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK`): see [`Entry::max_threads`].
    pub max_threads: u32,
    /// The most dynamic shared memory a launch may give it
    /// (`CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES`): [`DEFAULT_DYNAMIC_SHARED`] until
    /// `cuFuncSetAttribute` raises it. The fake models no static shared memory.
    pub max_dynamic_shared: AtomicU32,
    pub native: Option<Native>,
    /// Set by `cuModuleUnload`: a launch still queued must not run any more.
    pub unloaded: AtomicBool,
}

/// The kernels the fake runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Native {
    /// `add_one_u32(u32* x, u32 n)`: `x[i] += 1` for `i < n`.
    AddOneU32,
    /// `saxpy_f32(const f32* x, f32* y, u32 a_bits, u32 n)`: `y[i] = a * x[i] + y[i]`.
    SaxpyF32,
    /// `fail(u32* status)`: `*status = 1`.
    Fail,
    /// `empty()`.
    Empty,
    /// `trap()`: faults the device (`CUDA_ERROR_LAUNCH_FAILED`).
    Trap,
    /// `block_sum_u32(const u32* x, u32* out, u32 n, u32 words)`: `out[b]` = the sum of
    /// block `b`'s elements of `x` (those below `n`), gathered in the top `block.x` of `words`
    /// `u32`s of dynamic shared memory: a launch giving fewer than `4 * words` bytes (or
    /// `words < block.x`) reads outside its shared memory (`CUDA_ERROR_ILLEGAL_ADDRESS`).
    BlockSumU32,
}

impl Native {
    /// The native kernel called `name`, if there is one.
    fn named(name: &str) -> Option<Native> {
        Some(match name {
            "add_one_u32" => Native::AddOneU32,
            "saxpy_f32" => Native::SaxpyF32,
            "fail" => Native::Fail,
            "empty" => Native::Empty,
            "trap" => Native::Trap,
            "block_sum_u32" => Native::BlockSumU32,
            _ => return None,
        })
    }

    /// Its parameters' sizes.
    fn param_sizes(self) -> &'static [usize] {
        match self {
            Native::AddOneU32 => &[8, 4],
            Native::SaxpyF32 => &[8, 8, 4, 4],
            Native::Fail => &[8],
            Native::Empty | Native::Trap => &[],
            Native::BlockSumU32 => &[8, 8, 4, 4],
        }
    }

    fn find(name: &str, sizes: &[usize]) -> Option<Native> {
        Native::named(name).filter(|native| native.param_sizes() == sizes)
    }
}

/// An entry point read from PTX: its name and parameter sizes and alignments.
pub(crate) struct Entry {
    pub name: String,
    /// `(size, alignment)` of each parameter.
    pub params: Vec<(usize, usize)>,
    /// The most threads per block it launches with: the product of its `.maxntid` (or
    /// `.reqntid`) directive's dimensions, else [`MAX_BLOCK_THREADS`]. A real driver lowers
    /// the limit further for a kernel using many registers; the fake models the limit only
    /// through these directives.
    pub max_threads: u32,
}

/// The most threads a CUDA block may have on every device the fake models.
pub(crate) const MAX_BLOCK_THREADS: u32 = 1024;
/// The dynamic shared memory a kernel may be launched with before `cuFuncSetAttribute`
/// raises its limit: CUDA's 48 KiB.
pub(crate) const DEFAULT_DYNAMIC_SHARED: u32 = 48 << 10;
/// The most shared memory a block may have once its kernel opted in
/// (`CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN`): a Hopper GPU's 227 KiB.
pub(crate) const MAX_SHARED_OPTIN: u32 = 227 << 10;

impl Entry {
    /// The entry point of kernel `name` in a module whose parameter metadata the fake does not
    /// read (an AMDGPU code object): the native kernel's parameters, or none for a kernel the
    /// fake cannot run.
    pub(crate) fn by_name(name: &str) -> Entry {
        let sizes = Native::named(name).map_or(&[][..], Native::param_sizes);
        Entry {
            name: name.to_string(),
            params: sizes.iter().map(|&size| (size, size)).collect(),
            max_threads: MAX_BLOCK_THREADS,
        }
    }
}

/// The entry points of a PTX text, or the message `ptxas` would give (roughly) for text that
/// is not PTX the fake can read.
pub(crate) fn parse_ptx(text: &str) -> Result<Vec<Entry>, String> {
    let code: String = text
        .lines()
        .map(|line| line.split("//").next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n");
    for directive in [".version", ".target"] {
        if !code.split_whitespace().any(|t| t == directive) {
            return Err(format!("ptxas fatal   : PTX has no {directive} directive"));
        }
    }
    let mut entries = Vec::new();
    let mut rest = code.as_str();
    while let Some(at) = find_token(rest, ".entry") {
        rest = rest[at + ".entry".len()..].trim_start();
        let end = rest
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '$'))
            .unwrap_or(rest.len());
        let name = &rest[..end];
        if name.is_empty() {
            return Err("ptxas fatal   : .entry without a name".into());
        }
        rest = rest[end..].trim_start();
        let mut params = Vec::new();
        if let Some(inside) = rest.strip_prefix('(') {
            let close = inside
                .find(')')
                .ok_or_else(|| format!("ptxas fatal   : unclosed parameter list of {name}"))?;
            for param in inside[..close].split(',').filter(|p| !p.trim().is_empty()) {
                params.push(parse_param(param).map_err(|e| {
                    format!(
                        "ptxas fatal   : parameter '{}' of {name}: {e}",
                        param.trim()
                    )
                })?);
            }
            rest = &inside[close + 1..];
        }
        let (max_threads, after) = performance_directives(rest, name)?;
        rest = check_body(after, name)?;
        entries.push(Entry {
            name: name.to_string(),
            params,
            max_threads,
        });
    }
    Ok(entries)
}

/// PTX's instructions (ISA 8.x), by their base name (before the first `.`).
const OPCODES: &[&str] = &[
    "abs",
    "activemask",
    "add",
    "addc",
    "alloca",
    "and",
    "applypriority",
    "atom",
    "bar",
    "barrier",
    "bfe",
    "bfi",
    "bfind",
    "bmsk",
    "bra",
    "brev",
    "brkpt",
    "brx",
    "call",
    "clz",
    "cnot",
    "copysign",
    "cos",
    "cp",
    "createpolicy",
    "cvt",
    "cvta",
    "discard",
    "div",
    "dp2a",
    "dp4a",
    "elect",
    "ex2",
    "exit",
    "fence",
    "fma",
    "fns",
    "getctarank",
    "griddepcontrol",
    "isspacep",
    "istypep",
    "ld",
    "ldmatrix",
    "ldu",
    "lg2",
    "lop3",
    "mad",
    "mad24",
    "madc",
    "mapa",
    "match",
    "max",
    "mbarrier",
    "membar",
    "min",
    "mma",
    "mov",
    "movmatrix",
    "mul",
    "mul24",
    "multimem",
    "nanosleep",
    "neg",
    "not",
    "or",
    "pmevent",
    "popc",
    "prefetch",
    "prefetchu",
    "prmt",
    "rcp",
    "red",
    "redux",
    "rem",
    "ret",
    "rsqrt",
    "sad",
    "selp",
    "set",
    "setmaxnreg",
    "setp",
    "shf",
    "shfl",
    "shl",
    "shr",
    "sin",
    "slct",
    "sqrt",
    "st",
    "stackrestore",
    "stacksave",
    "stmatrix",
    "sub",
    "subc",
    "suld",
    "suq",
    "sured",
    "sust",
    "szext",
    "tanh",
    "testp",
    "tex",
    "tld4",
    "trap",
    "txq",
    "vabsdiff",
    "vabsdiff2",
    "vabsdiff4",
    "vadd",
    "vadd2",
    "vadd4",
    "vavrg2",
    "vavrg4",
    "vmad",
    "vmax",
    "vmax2",
    "vmax4",
    "vmin",
    "vmin2",
    "vmin4",
    "vote",
    "vset",
    "vset2",
    "vset4",
    "vshl",
    "vshr",
    "vsub",
    "vsub2",
    "vsub4",
    "wgmma",
    "wmma",
    "xor",
];

/// Reads the performance-tuning directives between an entry's parameters and its body
/// (`.maxntid 128, 1, 1`, `.reqntid 64`, `.maxnreg 32`, ...): the most threads per block they
/// allow, and the text after them.
fn performance_directives<'a>(text: &'a str, name: &str) -> Result<(u32, &'a str), String> {
    let mut rest = text.trim_start();
    let mut max_threads = MAX_BLOCK_THREADS;
    while let Some(directive) = rest.strip_prefix('.') {
        let end = directive
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(directive.len());
        let (word, after) = directive.split_at(end);
        // Its operands: numbers separated by commas, up to the next directive or the body.
        let operands_end = after.find(['.', '{', ';']).unwrap_or(after.len());
        let operands = &after[..operands_end];
        if matches!(word, "maxntid" | "reqntid") {
            let dims = operands
                .split(',')
                .map(|d| d.trim().parse::<u32>())
                .collect::<Result<Vec<_>, _>>()
                .ok()
                .filter(|d| (1..=3).contains(&d.len()) && !d.contains(&0))
                .ok_or_else(|| {
                    format!(
                        "ptxas fatal   : malformed .{word} of {name}: '{}'",
                        operands.trim()
                    )
                })?;
            let threads = dims.iter().map(|&d| u64::from(d)).product::<u64>();
            max_threads = max_threads.min(u32::try_from(threads).unwrap_or(u32::MAX));
        }
        rest = after[operands_end..].trim_start();
    }
    Ok((max_threads, rest))
}

/// Checks the body (`{ ... }`) of entry `name` at the start of `text`, if it has one: every
/// statement is a directive, a label or a PTX instruction (what `ptxas` would reject first).
/// Returns the text after it.
fn check_body<'a>(text: &'a str, name: &str) -> Result<&'a str, String> {
    let text = text.trim_start();
    let Some(inside) = text.strip_prefix('{') else {
        return Ok(text);
    };
    let mut depth = 1;
    let end = inside
        .char_indices()
        .find(|&(_, c)| {
            match c {
                '{' => depth += 1,
                '}' => depth -= 1,
                _ => {}
            }
            depth == 0
        })
        .map(|(i, _)| i)
        .ok_or_else(|| format!("ptxas fatal   : unclosed body of {name}"))?;
    for statement in inside[..end].split(';') {
        let mut statement = statement.trim().trim_start_matches(['{', '}']).trim();
        // Labels (`$L__BB0_2:`), possibly before an instruction.
        while let Some((label, after)) = statement.split_once(':') {
            if label.contains(char::is_whitespace) {
                break;
            }
            statement = after.trim().trim_start_matches(['{', '}']).trim();
        }
        let mut tokens = statement.split_whitespace();
        let mut opcode = tokens.next().unwrap_or("");
        if opcode.starts_with('@') {
            opcode = tokens.next().unwrap_or("");
        }
        if opcode.is_empty() || opcode.starts_with('.') {
            continue;
        }
        let base = opcode.split('.').next().unwrap_or("");
        if !OPCODES.contains(&base) {
            return Err(format!(
                "ptxas application ptx input: error   : Unknown instruction '{opcode}' in {name}"
            ));
        }
    }
    Ok(&inside[end + 1..])
}

/// The position of `token` in `text` as a whole word.
fn find_token(text: &str, token: &str) -> Option<usize> {
    let mut from = 0;
    while let Some(at) = text[from..].find(token) {
        let at = from + at;
        let after = text[at + token.len()..].chars().next();
        if after.is_none_or(|c| c.is_whitespace()) {
            return Some(at);
        }
        from = at + token.len();
    }
    None
}

/// `(size, alignment)` of a `.param` declaration such as `.param .u64 k_param_0` or
/// `.param .align 4 .b8 k_param_1[12]`.
fn parse_param(param: &str) -> Result<(usize, usize), String> {
    let tokens: Vec<&str> = param.split_whitespace().collect();
    if tokens.first() != Some(&".param") {
        return Err("not a .param".into());
    }
    let mut align = None;
    let mut size = None;
    let mut name = "";
    // After `.ptr`, a state space and `.align` describe the pointee, not the parameter.
    let mut pointee = false;
    let mut i = 1;
    while i < tokens.len() {
        match tokens[i] {
            ".align" => {
                if !pointee {
                    align = tokens.get(i + 1).and_then(|a| a.parse::<usize>().ok());
                }
                i += 1;
            }
            ".ptr" => pointee = true,
            ".global" | ".const" | ".shared" | ".local" => {}
            t if t.starts_with('.') => {
                size = Some(match t.get(2..).unwrap_or("") {
                    "8" => 1,
                    "16" => 2,
                    "32" => 4,
                    "64" => 8,
                    _ => return Err(format!("unknown type {t}")),
                });
            }
            t => name = t,
        }
        i += 1;
    }
    let size = size.ok_or("no type")?;
    let count = match name.split_once('[') {
        Some((_, n)) => n
            .trim_end_matches(']')
            .parse::<usize>()
            .map_err(|_| format!("bad array length in {name}"))?,
        None => 1,
    };
    Ok((size * count, align.unwrap_or(size)))
}

impl Kernel {
    /// The kernel of `entry`, with function handle `function`.
    pub(crate) fn new(function: u64, entry: &Entry) -> Kernel {
        let mut offset = 0usize;
        let params: Vec<(usize, usize)> = entry
            .params
            .iter()
            .map(|&(size, align)| {
                offset = offset.next_multiple_of(align.max(1));
                let at = offset;
                offset += size;
                (at, size)
            })
            .collect();
        let sizes: Vec<usize> = params.iter().map(|p| p.1).collect();
        Kernel {
            function,
            name: entry.name.clone(),
            native: Native::find(&entry.name, &sizes),
            params,
            max_threads: entry.max_threads,
            max_dynamic_shared: AtomicU32::new(DEFAULT_DYNAMIC_SHARED),
            unloaded: AtomicBool::new(false),
        }
    }
}

/// A kernel launch: the grid, the block and the argument values (each parameter's bytes as a
/// little-endian number), read when `cuLaunchKernel` was called.
pub(crate) struct Launch {
    pub kernel: Arc<Kernel>,
    pub native: Native,
    pub grid: [u32; 3],
    pub block: [u32; 3],
    /// Dynamic shared memory per block, in bytes.
    pub shared_memory_bytes: u32,
    pub args: Vec<u64>,
}

impl Launch {
    pub(crate) fn name(&self) -> &str {
        &self.kernel.name
    }
}

/// A fault injected by the client for the next kernel run.
static NEXT_FAULT: Mutex<Option<CUresult>> = Mutex::new(None);

/// Makes the next kernel that runs fault the device with `code`.
pub(crate) fn fault_next_kernel(code: CUresult) {
    *lock(&NEXT_FAULT) = Some(code);
}

/// Runs `launch`: `Err((code, why, broken))` faults the device; `broken` when the caller broke
/// the contract (memory it passed was freed before the kernel ran, or never was memory).
/// `device` is the device of the stream it runs on: memory only another device reaches is
/// such a broken contract too.
pub(crate) fn run(launch: &Launch, device: u32) -> Result<(), (CUresult, String, bool)> {
    KERNELS_RUN.fetch_add(1, Ordering::Relaxed);
    if let Some(code) = lock(&NEXT_FAULT).take() {
        return Err((code, "a fault injected by the test".into(), false));
    }
    let [gx, gy, gz] = launch.grid.map(u64::from);
    let [bx, by, bz] = launch.block.map(u64::from);
    // Threads with the same x index do the same thing: run each x once per such thread.
    let repeat = gy * gz * by * bz;
    let threads = gx * bx;
    let args = &launch.args;
    let mut memory = memory();
    if sticky(device).is_some() {
        return Ok(()); // faulted meanwhile: the host may have freed what this uses
    }
    if launch.kernel.unloaded.load(Ordering::Acquire) {
        return Err((
            CUresult::CUDA_ERROR_INVALID_HANDLE,
            "its module was unloaded before the kernel ran".into(),
            true,
        ));
    }
    let check = |memory: &crate::model::memory::Memory, ptr: u64, len: u64, what: &str| {
        memory.check_on(ptr, len as usize, device).map_err(|why| {
            (
                CUresult::CUDA_ERROR_ILLEGAL_ADDRESS,
                format!("{what}: {why}"),
                true,
            )
        })
    };
    match launch.native {
        Native::AddOneU32 => {
            let (x, n) = (args[0], args[1] as u32);
            let count = u64::from(n).min(threads);
            check(&memory, x, 4 * count, "x")?;
            for _ in 0..repeat {
                for i in 0..count {
                    let v = memory.read_u32(x + 4 * i);
                    memory.write_u32(x + 4 * i, v.wrapping_add(1));
                }
            }
        }
        Native::SaxpyF32 => {
            let (x, y, a, n) = (args[0], args[1], f32::from_bits(args[2] as u32), args[3]);
            let count = (n & 0xffff_ffff).min(threads);
            check(&memory, x, 4 * count, "x")?;
            check(&memory, y, 4 * count, "y")?;
            for _ in 0..repeat {
                for i in 0..count {
                    let xi = f32::from_bits(memory.read_u32(x + 4 * i));
                    let yi = f32::from_bits(memory.read_u32(y + 4 * i));
                    memory.write_u32(y + 4 * i, (a * xi + yi).to_bits());
                }
            }
        }
        Native::Fail => {
            check(&memory, args[0], 4, "status")?;
            memory.write_u32(args[0], 1);
        }
        Native::BlockSumU32 => {
            let (x, out, n, words) = (args[0], args[1], args[2] as u32, args[3]);
            if words < bx || 4 * words > u64::from(launch.shared_memory_bytes) {
                return Err((
                    CUresult::CUDA_ERROR_ILLEGAL_ADDRESS,
                    format!(
                        "shared memory out of bounds: the kernel addresses {} bytes, the \
                         launch gave {}",
                        4 * words.max(bx),
                        launch.shared_memory_bytes
                    ),
                    false,
                ));
            }
            let count = u64::from(n).min(threads);
            check(&memory, x, 4 * count, "x")?;
            check(&memory, out, 4 * gx, "out")?;
            for block in 0..gx {
                let sum = (block * bx..(block + 1) * bx)
                    .filter(|&i| i < count)
                    .fold(0u32, |sum, i| sum.wrapping_add(memory.read_u32(x + 4 * i)));
                memory.write_u32(out + 4 * block, sum);
            }
        }
        Native::Empty => {}
        Native::Trap => {
            return Err((
                CUresult::CUDA_ERROR_LAUNCH_FAILED,
                "trap instruction".into(),
                false,
            ))
        }
    }
    Ok(())
}
