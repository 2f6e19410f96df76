//! One module per subcommand; each takes its arguments, the roots of the sets' files, and
//! where to write its output and progress.

pub mod create;
pub mod destroy;
pub mod exec;
pub mod list;

pub use create::{CreateArgs, create};
pub use destroy::{DestroyOutcome, destroy};
pub use exec::exec;
pub use list::list;

#[cfg(test)]
mod tests;
