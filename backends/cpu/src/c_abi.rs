//! C ABI loader (being written).
