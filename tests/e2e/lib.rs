//! podpass's end-to-end tests. They live in this package's test targets (`e2e_<file>`),
//! each against the real `podpass` binary of the same build and real components on
//! 127.0.0.1; this library is empty.
