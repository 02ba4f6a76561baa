//! Model checks live in tests/; see README.
