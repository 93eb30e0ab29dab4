//! The `quicknat` binary's configuration file layer, as a library: the binary
//! (`src/main.rs`) and the fuzz targets (`fuzz/`) parse configurations with the same code.

pub mod config;
pub mod logging;
