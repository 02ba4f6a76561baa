//! Examples that span several halcyon backends; see `examples/`. Nothing to use here.
