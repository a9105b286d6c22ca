//! Entry point of the conformance suite (`cargo test -p tensormem-conformance`).

use std::process::ExitCode;

fn main() -> ExitCode {
    let targets = tensormem_conformance::backends::targets();
    let cases = tensormem_conformance::cases::all();
    if tensormem_conformance::run_suite(&targets, &cases) {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
