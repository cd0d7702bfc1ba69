//! What is wrong with a config: each problem located (file, line,
//! section, field) and what would be valid, all of them together.

use std::fmt;
use std::path::PathBuf;

/// One thing wrong with a config file, located as precisely as possible.
///
/// For the library's settings and jobs, `section` and `field` name the
/// place (`line_col` is `None`).
///
/// ```
/// use cronlease::{Cluster, RedisSettings, SchedulerError};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let settings = RedisSettings::quorum(&["redis://10.0.0.1", "redis://10.0.0.2"]);
/// let Err(SchedulerError::Config(error)) = Cluster::connect(settings).await else {
///     panic!("a quorum needs 3 masters");
/// };
/// let problem = &error.problems[0];
/// assert_eq!(problem.section.as_deref(), Some("redis"));
/// assert_eq!(problem.field.as_deref(), Some("quorum"));
/// assert_eq!(problem.line_col, None);
/// println!("{}", problem.message);
/// # }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Problem {
    /// 1-based line and column, when the problem has a place in the file.
    pub line_col: Option<(usize, usize)>,
    /// The section the problem is in: `redis`, `daemon`, `notify.<name>`
    /// or `jobs.<name>`.
    pub section: Option<String>,
    /// The field at fault (`schedule`, `timeout`, …), when one is.
    pub field: Option<String>,
    /// What is wrong, and what would be valid.
    pub message: String,
}

/// A config file that cannot be used, with every problem found in it.
///
/// For the library: the settings and jobs given to [`Cluster::connect`],
/// [`SchedulerBuilder::start`], [`Scheduler::add`] or
/// [`Scheduler::set_jobs`] (in [`SchedulerError::Config`]). Nothing was
/// applied. `Display` prints one line per problem, as `cronlease check`
/// does.
///
/// [`Cluster::connect`]: crate::Cluster::connect
/// [`SchedulerBuilder::start`]: crate::SchedulerBuilder::start
/// [`Scheduler::add`]: crate::Scheduler::add
/// [`Scheduler::set_jobs`]: crate::Scheduler::set_jobs
/// [`SchedulerError::Config`]: crate::SchedulerError::Config
///
/// ```
/// use std::time::Duration;
/// use cronlease::{Cluster, RedisSettings, SchedulerError};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let settings = RedisSettings::url("redis://127.0.0.1:6379/0")
///     .key_prefix("")
///     .command_timeout(Duration::from_secs(600));
/// let Err(SchedulerError::Config(error)) = Cluster::connect(settings).await else {
///     panic!("an empty prefix and a 10-minute timeout are refused");
/// };
/// assert_eq!(error.problems.len(), 2);
/// assert!(error.to_string().starts_with("invalid config <embedded scheduler>: 2 problems"));
/// # }
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub struct ConfigError {
    /// The file (for an embedded scheduler: `<embedded scheduler>`).
    pub file: PathBuf,
    /// Every problem found, in the order of the file.
    pub problems: Vec<Problem>,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self.problems.len();
        write!(
            f,
            "invalid config {}: {n} problem{}",
            self.file.display(),
            if n == 1 { "" } else { "s" }
        )?;
        for problem in &self.problems {
            write!(f, "\n  {}", self.file.display())?;
            if let Some((line, col)) = problem.line_col {
                write!(f, ":{line}:{col}")?;
            }
            f.write_str(":")?;
            if let Some(section) = problem.section.as_deref() {
                match section.strip_prefix("jobs.") {
                    Some(job) => write!(f, " job {job:?}")?,
                    None if section.starts_with('[') => write!(f, " {section}")?,
                    None => write!(f, " [{section}]")?,
                }
            }
            if let Some(field) = &problem.field {
                let sep = if problem.section.is_some() { "," } else { "" };
                write!(f, "{sep} field `{field}`")?;
            }
            if problem.section.is_some() || problem.field.is_some() {
                f.write_str(":")?;
            }
            write!(f, " {}", problem.message)?;
        }
        Ok(())
    }
}
