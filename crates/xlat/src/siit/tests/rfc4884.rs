//! RFC 4884 tests (filled in below).
