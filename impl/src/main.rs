//! The `workrail` binary: the MCP server over stdio and the operator CLI (see `workrail --help`).

#![forbid(unsafe_code)]

fn main() -> std::process::ExitCode {
    workrail::cli::main()
}
