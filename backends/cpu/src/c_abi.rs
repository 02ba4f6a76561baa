//! The C-ABI executable format (`"cpu-c-abi-v1"`): shared libraries that export
//! `halcyon_cpu_library_query` as described in `include/halcyon_cpu.h`.
//!
//! An executable's bytes are the library's image (the file contents), so the executable cache
//! keys it by content. Loading writes the image to a fresh file in the temporary directory,
//! `dlopen`s it, removes the file (the mapping stays valid), asks the library for its entry-point
//! table and validates and copies that table. Each kernel holds the library, so the code stays
//! mapped while any kernel (or the executable) lives.
//!
//! Loading a library runs its code (initialisers and the query function) in this process, and
//! the dynamic loader trusts the image's structure: a truncated or corrupted library can crash
//! the process (a valid library cut to a few kilobytes dies with `SIGBUS` in `dlopen`) or run
//! arbitrary code. So the format loads only from an unchecked spec ([`c_library_spec`] or
//! [`ExecutableSpec::bytes_unchecked`], both `unsafe`); a checked [`ExecutableSpec::bytes`] spec
//! is refused. Cheap checks for honest mistakes (an empty file, a file that is not ELF) remain.

use std::ffi::{c_char, c_int, c_void, CStr};
use std::fs::OpenOptions;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use halcyon::{EntryPoint, Error, ExecutableSpec, Result, StatusCode};
use libloading::Library;

use crate::kernel::{CpuExecutable, DispatchState, Kernel};

/// The format name of C-ABI executables (shared libraries implementing `halcyon_cpu.h`).
pub const FORMAT_C_ABI: &str = "cpu-c-abi-v1";

/// The ABI version this loader understands (`HALCYON_CPU_ABI_VERSION` in `halcyon_cpu.h`).
const ABI_VERSION: u32 = 1;

/// The symbol a library exports (`HALCYON_CPU_LIBRARY_QUERY_SYMBOL`).
const QUERY_SYMBOL: &str = "halcyon_cpu_library_query";

/// The most entry points a library may declare (`HALCYON_CPU_MAX_ENTRY_POINTS`).
const MAX_ENTRY_POINTS: u32 = 4096;

/// `halcyon_cpu_dispatch_state_v1`.
#[repr(C)]
struct DispatchStateV1 {
    workgroup_id: [u32; 3],
    workgroup_count: [u32; 3],
    workgroup_size: [u32; 3],
    constant_count: u32,
    constants: *const u32,
    binding_count: u32,
    bindings: *const *mut c_void,
    binding_lengths: *const u64,
}

/// `halcyon_cpu_kernel_v1`.
type KernelV1 = unsafe extern "C" fn(state: *const DispatchStateV1) -> c_int;

/// `halcyon_cpu_entry_point_v1`.
#[repr(C)]
struct EntryPointV1 {
    name: *const c_char,
    kernel: Option<KernelV1>,
    workgroup_size: [u32; 3],
    binding_count: u32,
    constant_count: u32,
}

/// `halcyon_cpu_library_v1`.
#[repr(C)]
struct LibraryV1 {
    abi_version: u32,
    entry_point_count: u32,
    entry_points: *const EntryPointV1,
}

/// `halcyon_cpu_library_query_fn`.
type QueryFn = unsafe extern "C" fn(max_abi_version: u32) -> *const LibraryV1;

/// A spec for the shared library at `path`, in the [`FORMAT_C_ABI`] format.
///
/// The file is read now; the spec holds its bytes, so the device's executable cache recognises
/// the same library however it was reached. The library's entry-point table is checked when a
/// device loads the spec; the library itself is handed to the dynamic loader, which trusts it.
///
/// ```no_run
/// # fn main() -> halcyon::Result<()> {
/// let device = halcyon_cpu::default_device()?;
/// // SAFETY: kernels.so is built from our own sources against halcyon_cpu.h by the system C
/// // compiler, is not modified afterwards, and its initialisers and kernels are sound.
/// let spec = unsafe { halcyon_cpu::c_library_spec("target/kernels.so")? };
/// let executable = device.load_executable(&spec)?;
/// # let _ = executable;
/// # Ok(())
/// # }
/// ```
///
/// # Safety
///
/// Loading the spec `dlopen`s the file's bytes, which runs the library's initialisers and
/// later its kernels in this process, and the dynamic loader does not validate the image. The
/// file must be a shared library for this machine built against `include/halcyon_cpu.h`
/// (exporting `halcyon_cpu_library_query` as the header describes), unmodified since it was
/// linked (not truncated or corrupted), whose initialisers and query function are sound to run
/// and whose kernels are sound to run on any bindings and constants a dispatch of its entry
/// points may pass (the counts it declares are checked; the contents and lengths are the
/// kernel's to check), as with `libloading::Library::new`.
///
/// # Errors
///
/// When the file cannot be read, an error whose code follows the I/O error (`NotFound`,
/// `PermissionDenied`, `InvalidArgument` for a directory...) and whose message names the path;
/// `InvalidArgument` when the file is empty or (on ELF platforms) not an ELF file.
pub unsafe fn c_library_spec(path: impl AsRef<Path>) -> Result<ExecutableSpec> {
    let path = path.as_ref();
    let bytes = std::fs::read(path).map_err(|err| {
        Error::with_source(
            io_status(&err),
            format!(
                "cannot read the {FORMAT_C_ABI} library '{}'",
                path.display()
            ),
            err,
        )
    })?;
    check_image(&bytes).map_err(|problem| {
        Error::new(
            StatusCode::InvalidArgument,
            format!("the {FORMAT_C_ABI} library '{}' {problem}", path.display()),
        )
    })?;
    // SAFETY: the caller vouches for the library (this function's contract is the one
    // `bytes_unchecked` asks for a CPU C-ABI library).
    Ok(unsafe { ExecutableSpec::bytes_unchecked(FORMAT_C_ABI, bytes) })
}

/// The cheap checks that catch honest mistakes before the loader sees an image: not empty, and
/// on ELF platforms an ELF header. They cannot tell a sound library from a damaged one.
fn check_image(image: &[u8]) -> std::result::Result<(), String> {
    if image.is_empty() {
        return Err("is empty; expected a shared library".into());
    }
    if cfg!(all(unix, not(target_vendor = "apple"))) {
        // The smallest ELF header (32-bit) is 52 bytes.
        if !image.starts_with(b"\x7fELF") {
            return Err(format!(
                "is not an ELF shared library ({} bytes not starting with \\x7fELF)",
                image.len()
            ));
        }
        if image.len() < 52 {
            return Err(format!(
                "is {} bytes, shorter than an ELF header: not a whole shared library",
                image.len()
            ));
        }
    }
    Ok(())
}

/// Loads a [`FORMAT_C_ABI`] executable from a shared library image.
///
/// # Safety
/// `image` must be a library as [`c_library_spec`] requires: built against `halcyon_cpu.h`,
/// unmodified, with sound initialisers and kernels.
pub(crate) unsafe fn load(image: &[u8]) -> Result<CpuExecutable> {
    check_image(image).map_err(|problem| {
        Error::new(
            StatusCode::InvalidArgument,
            format!("the {FORMAT_C_ABI} executable image {problem}"),
        )
    })?;
    // SAFETY: the caller vouches for the image (this function's contract).
    let library = Arc::new(unsafe { open_image(image) }?);

    // SAFETY: `QueryFn` is the type `halcyon_cpu.h` gives `halcyon_cpu_library_query`; a library
    // implementing the header exports it with that type. The symbol is used only while `library`
    // is loaded (it is copied out of the `Symbol` and called below, before `library` can drop).
    let query: QueryFn = match unsafe { library.get::<QueryFn>(QUERY_SYMBOL.as_bytes()) } {
        Ok(symbol) => *symbol,
        Err(err) => {
            return Err(Error::new(
                StatusCode::NotFound,
                format!(
                    "the {FORMAT_C_ABI} library does not export '{QUERY_SYMBOL}' (declare it with \
                     HALCYON_CPU_EXPORT from halcyon_cpu.h): {err}"
                ),
            ))
        }
    };

    // SAFETY: `query` is the library's `halcyon_cpu_library_query`, which takes the highest ABI
    // version the caller understands and may be called from any thread (halcyon_cpu.h).
    let table = unsafe { query(ABI_VERSION) };
    if table.is_null() {
        return Err(Error::new(
            StatusCode::Unimplemented,
            format!(
                "the {FORMAT_C_ABI} library serves no ABI version this loader understands: \
                 {QUERY_SYMBOL}({ABI_VERSION}) returned NULL (this loader supports ABI version \
                 {ABI_VERSION})"
            ),
        ));
    }
    if !table.is_aligned() {
        return Err(Error::new(
            StatusCode::InvalidArgument,
            format!("{QUERY_SYMBOL} returned a misaligned table pointer {table:p}"),
        ));
    }
    // SAFETY: `table` is non-null and aligned, and halcyon_cpu.h requires it to point to a
    // `halcyon_cpu_library_v1` that stays valid and unchanged while the library is loaded
    // (`library` is alive for the rest of this function). Every ABI version starts with
    // `abi_version`, so reading the whole v1 struct is checked against it right after; v1 is the
    // only version, and a library may not answer with a version above the one asked for.
    let table = unsafe { &*table };
    if table.abi_version != ABI_VERSION {
        return Err(Error::new(
            StatusCode::Unimplemented,
            format!(
                "the {FORMAT_C_ABI} library answered with ABI version {}, but this loader \
                 supports only ABI version {ABI_VERSION} (it asked for version <= {ABI_VERSION})",
                table.abi_version
            ),
        ));
    }

    let raw_entry_points = entry_point_table(table)?;
    let mut entry_points = Vec::with_capacity(raw_entry_points.len());
    let mut kernels: Vec<Arc<dyn Kernel>> = Vec::with_capacity(raw_entry_points.len());
    for (index, raw) in raw_entry_points.iter().enumerate() {
        let entry_point = validate_entry_point(index, raw, &entry_points)?;
        let Some(function) = raw.kernel else {
            return Err(invalid_entry_point(
                index,
                Some(&entry_point.name),
                "has a NULL kernel function",
            ));
        };
        kernels.push(Arc::new(CKernel {
            name: entry_point.name.clone(),
            binding_count: entry_point.binding_count,
            constant_count: entry_point.constant_count,
            function,
            _library: library.clone(),
        }));
        entry_points.push(entry_point);
    }

    Ok(CpuExecutable {
        entry_points,
        kernels,
        _keep_alive: Some(Box::new(library)),
    })
}

/// The entry-point array of a v1 table, validated for count, null and alignment.
fn entry_point_table(table: &LibraryV1) -> Result<&[EntryPointV1]> {
    let count = table.entry_point_count;
    if count > MAX_ENTRY_POINTS {
        return Err(Error::new(
            StatusCode::InvalidArgument,
            format!(
                "the {FORMAT_C_ABI} library declares {count} entry points; at most \
                 {MAX_ENTRY_POINTS} are allowed"
            ),
        ));
    }
    if count == 0 {
        return Ok(&[]);
    }
    let entries = table.entry_points;
    if entries.is_null() {
        return Err(Error::new(
            StatusCode::InvalidArgument,
            format!(
                "the {FORMAT_C_ABI} library declares {count} entry points but its entry_points \
                 pointer is NULL"
            ),
        ));
    }
    if !entries.is_aligned() {
        return Err(Error::new(
            StatusCode::InvalidArgument,
            format!("the {FORMAT_C_ABI} library's entry_points pointer {entries:p} is misaligned"),
        ));
    }
    // SAFETY: `entries` is non-null and aligned; halcyon_cpu.h requires it to point to
    // `entry_point_count` (at most 4096, so the size cannot overflow) entry points that stay
    // valid and unchanged while the library is loaded, and the returned slice borrows `table`,
    // which the caller only holds while the library is loaded.
    Ok(unsafe { std::slice::from_raw_parts(entries, count as usize) })
}

/// Checks one entry point's name and workgroup size and copies its metadata.
fn validate_entry_point(
    index: usize,
    raw: &EntryPointV1,
    earlier: &[EntryPoint],
) -> Result<EntryPoint> {
    if raw.name.is_null() {
        return Err(invalid_entry_point(index, None, "has a NULL name"));
    }
    // SAFETY: `raw.name` is non-null, and halcyon_cpu.h requires it to be a NUL-terminated string
    // that stays valid while the library is loaded; it is copied before this function returns.
    let name = unsafe { CStr::from_ptr(raw.name) };
    let name = match name.to_str() {
        Ok(name) => name.to_owned(),
        Err(err) => {
            return Err(invalid_entry_point(
                index,
                None,
                &format!(
                    "has a name that is not valid UTF-8 ({err}): {:?}",
                    name.to_string_lossy()
                ),
            ))
        }
    };
    if name.is_empty() {
        return Err(invalid_entry_point(index, None, "has an empty name"));
    }
    if let Some(first) = earlier.iter().position(|e| e.name == name) {
        return Err(invalid_entry_point(
            index,
            Some(&name),
            &format!("has the same name as entry point {first}"),
        ));
    }
    if raw.workgroup_size.contains(&0) {
        return Err(invalid_entry_point(
            index,
            Some(&name),
            &format!(
                "has workgroup size {:?}; every component must be at least 1",
                raw.workgroup_size
            ),
        ));
    }
    Ok(EntryPoint {
        name,
        workgroup_size: raw.workgroup_size,
        binding_count: raw.binding_count,
        constant_count: raw.constant_count,
    })
}

fn invalid_entry_point(index: usize, name: Option<&str>, problem: &str) -> Error {
    let which = match name {
        Some(name) => format!("entry point {index} ('{name}')"),
        None => format!("entry point {index}"),
    };
    Error::new(
        StatusCode::InvalidArgument,
        format!("the {FORMAT_C_ABI} library's {which} {problem}"),
    )
}

/// A kernel of a loaded C-ABI library.
struct CKernel {
    name: String,
    binding_count: u32,
    constant_count: u32,
    function: KernelV1,
    /// Keeps `function`'s code mapped.
    _library: Arc<Library>,
}

impl Kernel for CKernel {
    fn run(
        &self,
        dispatch: &DispatchState,
        workgroup_id: [u32; 3],
    ) -> std::result::Result<(), String> {
        let bindings = &dispatch.binding_ptrs;
        let lengths = &dispatch.binding_lengths;
        let constants = &dispatch.constants[..];
        // The C kernel trusts these counts, so check them here rather than risk an
        // out-of-bounds read in the kernel.
        if bindings.len() != lengths.len() {
            return Err(format!(
                "kernel '{}': dispatch has {} binding pointers but {} binding lengths",
                self.name,
                bindings.len(),
                lengths.len()
            ));
        }
        let (Ok(binding_count), Ok(constant_count)) = (
            u32::try_from(bindings.len()),
            u32::try_from(constants.len()),
        ) else {
            return Err(format!(
                "kernel '{}': dispatch has too many bindings ({}) or constants ({})",
                self.name,
                bindings.len(),
                constants.len()
            ));
        };
        if binding_count < self.binding_count || constant_count < self.constant_count {
            return Err(format!(
                "kernel '{}' takes {} bindings and {} constants, but the dispatch supplies {} \
                 and {}",
                self.name, self.binding_count, self.constant_count, binding_count, constant_count
            ));
        }
        let state = DispatchStateV1 {
            workgroup_id,
            workgroup_count: dispatch.workgroup_count,
            workgroup_size: dispatch.workgroup_size,
            constant_count,
            constants: if constants.is_empty() {
                std::ptr::null()
            } else {
                constants.as_ptr()
            },
            binding_count,
            bindings: if bindings.is_empty() {
                std::ptr::null()
            } else {
                bindings.as_ptr().cast::<*mut c_void>()
            },
            binding_lengths: if lengths.is_empty() {
                std::ptr::null()
            } else {
                lengths.as_ptr()
            },
        };
        // SAFETY: `function` is a kernel of `_library`, which this struct keeps loaded. `state`
        // matches `halcyon_cpu_dispatch_state_v1` (#[repr(C)] mirror) and lives on the stack for
        // the whole call; its arrays point into `dispatch`, which outlives the call, with the
        // counts checked above. The binding pointers refer to buffer memory that the dispatch
        // keeps alive while workgroups run (see `DispatchState`); what the kernel does with it
        // is its contract, as on any device.
        let code = unsafe { (self.function)(std::ptr::from_ref(&state)) };
        if code == 0 {
            Ok(())
        } else {
            Err(format!(
                "kernel '{}' returned {code} for workgroup {workgroup_id:?}",
                self.name
            ))
        }
    }
}

static NEXT_IMAGE: AtomicU64 = AtomicU64::new(0);

/// Removes the temporary image file when dropped (after `dlopen`, or on failure).
struct TempImage(PathBuf);

impl Drop for TempImage {
    fn drop(&mut self) {
        // Best effort: a leftover file is harmless and there is nobody to report to.
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Writes `image` to a fresh file in the temporary directory and loads it.
///
/// # Safety
/// As [`load`]: `image` is a sound, unmodified library.
unsafe fn open_image(image: &[u8]) -> Result<Library> {
    let dir = std::env::temp_dir();
    let mut attempt = 0;
    let (mut file, temp) = loop {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let path = dir.join(format!(
            "halcyon-cpu-{}-{}-{nanos:08x}.so",
            std::process::id(),
            NEXT_IMAGE.fetch_add(1, Ordering::Relaxed),
        ));
        let mut options = OpenOptions::new();
        options.write(true).create_new(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt;
            options.mode(0o700);
        }
        match options.open(&path) {
            Ok(file) => break (file, TempImage(path)),
            Err(err) if err.kind() == std::io::ErrorKind::AlreadyExists && attempt < 16 => {
                attempt += 1;
            }
            Err(err) => {
                return Err(Error::with_source(
                    io_status(&err),
                    format!(
                        "cannot create a temporary file for the {FORMAT_C_ABI} library in '{}' \
                         (set TMPDIR to a writable directory)",
                        dir.display()
                    ),
                    err,
                ))
            }
        }
    };
    if let Err(err) = file.write_all(image).and_then(|()| file.flush()) {
        return Err(Error::with_source(
            io_status(&err),
            format!(
                "cannot write the {FORMAT_C_ABI} library to '{}'",
                temp.0.display()
            ),
            err,
        ));
    }
    drop(file);

    // SAFETY: the file holds exactly `image`, which the caller vouches for.
    match unsafe { open_library(&temp.0) } {
        Ok(library) => Ok(library),
        Err(err) => {
            let hint = if !cfg!(all(unix, not(target_vendor = "apple"))) {
                ""
            } else if image.starts_with(b"\x7fELF") {
                " (the image is an ELF file; if it is a shared library for this machine, the \
                 temporary directory may be mounted noexec: set TMPDIR to another directory)"
            } else {
                " (the image is not an ELF shared library)"
            };
            Err(Error::new(
                StatusCode::InvalidArgument,
                format!(
                    "cannot load the {FORMAT_C_ABI} library image ({} bytes): {err}{hint}",
                    image.len()
                ),
            ))
        }
    }
    // `temp` drops here and removes the file; the loaded mapping stays valid.
}

/// `dlopen`s the library at `path`.
///
/// # Safety
/// As [`load`]: the file is a sound, unmodified library.
#[cfg(unix)]
unsafe fn open_library(path: &Path) -> std::result::Result<Library, libloading::Error> {
    use libloading::os::unix::{Library as UnixLibrary, RTLD_LOCAL, RTLD_NOW};
    // RTLD_NOW: resolve every symbol now, so a library with an undefined symbol fails to load
    // instead of failing in the middle of a dispatch. RTLD_LOCAL: its symbols stay private.
    // SAFETY: loading runs the library's initialisers and trusts its structure; the caller
    // vouches for both (this function's contract, from `c_library_spec`).
    unsafe { UnixLibrary::open(Some(path), RTLD_NOW | RTLD_LOCAL) }.map(Library::from)
}

/// `LoadLibrary`s the library at `path`.
///
/// # Safety
/// As [`load`]: the file is a sound, unmodified library.
#[cfg(not(unix))]
unsafe fn open_library(path: &Path) -> std::result::Result<Library, libloading::Error> {
    // SAFETY: as above: the caller vouches for the library.
    unsafe { Library::new(path) }
}

/// The status code for an I/O error.
fn io_status(err: &std::io::Error) -> StatusCode {
    use std::io::ErrorKind;
    match err.kind() {
        ErrorKind::NotFound => StatusCode::NotFound,
        ErrorKind::PermissionDenied | ErrorKind::ReadOnlyFilesystem => StatusCode::PermissionDenied,
        ErrorKind::AlreadyExists => StatusCode::AlreadyExists,
        ErrorKind::InvalidInput
        | ErrorKind::InvalidData
        | ErrorKind::IsADirectory
        | ErrorKind::NotADirectory
        | ErrorKind::InvalidFilename => StatusCode::InvalidArgument,
        ErrorKind::OutOfMemory
        | ErrorKind::StorageFull
        | ErrorKind::QuotaExceeded
        | ErrorKind::FileTooLarge => StatusCode::ResourceExhausted,
        ErrorKind::Interrupted | ErrorKind::WouldBlock | ErrorKind::ResourceBusy => {
            StatusCode::Unavailable
        }
        _ => StatusCode::Unknown,
    }
}

// Not under Miri: these tests run the C compiler and `dlopen`, foreign code Miri cannot run.
#[cfg(all(test, not(miri)))]
mod tests;
