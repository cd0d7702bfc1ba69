//! How a `cronlease` command ends: every exit status the binary uses, in
//! one enum, so the numbers live here and nowhere else. They follow
//! sysexits(3) where one fits.

/// The exit status of a command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// 0: done.
    Success,
    /// 1: a runtime failure (Redis unreachable, I/O), or an operation that
    /// did not succeed (a triggered run that failed).
    Failure,
    /// 2: invalid input (command line, config file): nothing was done.
    InvalidInput,
    /// 75 (EX_TEMPFAIL): `cronlease lock` did not get the lock, or lost its
    /// lease; try again later.
    TempFail,
    /// 78 (EX_CONFIG): Redis is set up so that it may lose our keys.
    RedisConfig,
    /// The exit status of the command `cronlease lock` ran.
    Command(u8),
}

impl Exit {
    /// The number the process exits with.
    pub fn code(self) -> u8 {
        match self {
            Exit::Success => 0,
            Exit::Failure => 1,
            Exit::InvalidInput => 2,
            Exit::TempFail => 75,
            Exit::RedisConfig => 78,
            Exit::Command(code) => code,
        }
    }
}

impl From<Exit> for std::process::ExitCode {
    fn from(exit: Exit) -> Self {
        std::process::ExitCode::from(exit.code())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_numbers() {
        let codes: Vec<u8> = [
            Exit::Success,
            Exit::Failure,
            Exit::InvalidInput,
            Exit::TempFail,
            Exit::RedisConfig,
            Exit::Command(3),
        ]
        .map(Exit::code)
        .to_vec();
        assert_eq!(codes, [0, 1, 2, 75, 78, 3]);
    }
}
