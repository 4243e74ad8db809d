//! bmcctl's exit codes: one table for every command, and the same for one
//! machine as for many (issue 34). docs/BMCCTL.md ("Exit codes") lists them.

use bmcfleet_schema::{BatchState, ErrorCode, Reply};
use std::process::ExitCode;

/// The batch (every machine's batch of a fleet run) succeeded; or, not
/// waiting, it was accepted.
pub const SUCCESS: u8 = 0;
/// A batch finished without succeeding (a fleet run: any machine's batch
/// failed, was refused or never started).
pub const FAILED: u8 = 1;
/// Usage: a bad flag or file, an unknown machine, a selector matching no
/// machine. Nothing was submitted.
pub const USAGE: u8 = 2;
/// The gateway refused the request, or NATS (the gateway) could not be reached.
pub const REFUSED: u8 = 3;
/// Waited, but no final result: no worker owns the batch's partition (the
/// batch stays queued), or `--timeout` (the gateway's longest wait) ran out
/// first. The batch may still run: `bmcctl status ID`.
pub const NOT_FINISHED: u8 = 4;

/// The exit code a gateway's reply means.
pub fn of_reply(reply: &Reply) -> ExitCode {
    ExitCode::from(match reply {
        Reply::Error(e) if e.code == ErrorCode::MachineNotFound => USAGE,
        // The gateway's own wait ran out: the batch is queued or running.
        Reply::Error(e) if e.code == ErrorCode::Timeout => NOT_FINISHED,
        Reply::Error(_) => REFUSED,
        Reply::Accepted(a) if a.unowned.is_some() => NOT_FINISHED,
        Reply::Result(r) if r.state == BatchState::Succeeded => SUCCESS,
        Reply::Result(_) => FAILED,
        _ => SUCCESS,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use bmcfleet_schema::{Accepted, ErrorBody, Unowned};

    #[test]
    fn one_code_per_outcome() {
        let code = |r: &Reply| format!("{:?}", of_reply(r));
        let accepted = Accepted {
            id: ulid::Ulid::nil(),
            stream_sequence: 1,
            duplicate: false,
            subject: "s".into(),
            unowned: None,
        };
        assert_eq!(code(&Reply::Accepted(accepted.clone())), format!("{:?}", ExitCode::from(SUCCESS)));
        let unowned = Accepted { unowned: Some(Unowned::new(3, Some(0))), ..accepted };
        assert_eq!(code(&Reply::Accepted(unowned)), format!("{:?}", ExitCode::from(NOT_FINISHED)));
        let unknown = Reply::Error(ErrorBody::new(ErrorCode::MachineNotFound, "no machine `x`"));
        assert_eq!(code(&unknown), format!("{:?}", ExitCode::from(USAGE)), "as a fleet run's unknown machine");
        let refused = Reply::Error(ErrorBody::new(ErrorCode::TooManyActions, "no"));
        assert_eq!(code(&refused), format!("{:?}", ExitCode::from(REFUSED)));
    }
}
