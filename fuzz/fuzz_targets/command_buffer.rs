//! Command-buffer recording, validation and binding-table resolution against a model of the
//! documented rules: see `halcyon_fuzz::command_buffer` for what it asserts.

#![no_main]

use halcyon_fuzz::command_buffer::{run, Input};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|input: Input| {
    run(input);
});
