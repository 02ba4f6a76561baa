use halcyon::EntryPoint;

use super::modules::cubin_status_word;

#[test]
fn cubin_kernels_without_parameters_take_no_status_word() {
    let entry = |binding_count, constant_count| EntryPoint {
        name: "k".into(),
        workgroup_size: [1, 1, 1],
        binding_count,
        constant_count,
    };
    // The driver's report decides where it reported parameters.
    assert!(cubin_status_word(Some(true), false, &entry(1, 0)));
    assert!(!cubin_status_word(Some(false), false, &entry(1, 0)));
    // No parameters reported for an entry point declaring none: a parameterless kernel.
    assert!(!cubin_status_word(None, true, &entry(0, 0)));
    // No parameters reported for one declaring some, or no report: launched with a word.
    assert!(cubin_status_word(None, true, &entry(1, 0)));
    assert!(cubin_status_word(None, true, &entry(0, 2)));
    assert!(cubin_status_word(None, false, &entry(0, 0)));
}
