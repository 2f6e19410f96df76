//! Reference pages of the docs book generated from the code, so that they cannot drift: each
//! binary's tests render its command line here and compare it with the page in
//! `docs/src/reference/` ([`crate::assert_golden`]; `OI_UPDATE_GOLDEN=1` rewrites it).

use std::fmt::Write as _;

/// The width help is wrapped at on the page, whatever the terminal running the test.
const WIDTH: usize = 100;

/// The command line reference of one binary: a contents list, then every command's `--help`
/// as the binary prints it, one section per command (hidden commands and `help` left out).
pub fn cli_markdown(command: clap::Command, what: &str) -> String {
    let mut command = hide_env_values(command.term_width(WIDTH).max_term_width(WIDTH));
    command.build();
    let name = command.get_name().to_string();
    let mut pages = Vec::new();
    collect(&mut command, &name, &mut pages);
    let mut out = String::new();
    let _ = writeln!(out, "# `{name}` command line\n");
    let _ = writeln!(
        out,
        "{what}\n\nThis page is generated from the code (`{name} --help` of every command); a \
         test fails when it differs, and `OI_UPDATE_GOLDEN=1 scripts/test.sh` rewrites it.\n"
    );
    for (path, _) in &pages {
        let depth = path.matches(' ').count();
        let _ = writeln!(out, "{}- [`{path}`](#{})", "  ".repeat(depth), anchor(path));
    }
    for (path, help) in &pages {
        let _ = writeln!(out, "\n## `{path}`\n\n```text\n{}\n```", help.trim_end());
    }
    out
}

/// Names each argument's environment variable without the value it has where the test runs,
/// so the page is the same on every machine.
fn hide_env_values(command: clap::Command) -> clap::Command {
    let names: Vec<String> = command
        .get_subcommands()
        .map(|s| s.get_name().to_string())
        .collect();
    names.iter().fold(
        command.mut_args(|a| a.hide_env_values(true)),
        |command, name| command.mut_subcommand(name, hide_env_values),
    )
}

fn collect(command: &mut clap::Command, path: &str, pages: &mut Vec<(String, String)>) {
    pages.push((path.to_string(), command.render_long_help().to_string()));
    for sub in command.get_subcommands_mut() {
        if sub.is_hide_set() || sub.get_name() == "help" {
            continue;
        }
        let sub_path = format!("{path} {}", sub.get_name());
        collect(sub, &sub_path, pages);
    }
}

/// The anchor mdBook (and GitHub) gives a heading of this text, backticks dropped: trimmed,
/// lower case, spaces as `-`, other punctuation dropped. The pages generated here link to
/// their headings with it, and `cargo xtask check-links` checks every link's anchor with it.
pub fn anchor(heading: &str) -> String {
    heading
        .trim()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => c.to_lowercase().next(),
            _ => None,
        })
        .collect()
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn every_visible_command_gets_a_section_with_its_own_help() {
        let command = clap::Command::new("tool")
            .about("does things")
            .subcommand(
                clap::Command::new("alpha")
                    .about("the first")
                    .arg(clap::Arg::new("name").long("name").help("who"))
                    .arg(clap::Arg::new("path").long("path").env("PATH"))
                    .subcommand(clap::Command::new("deep").about("nested")),
            )
            .subcommand(clap::Command::new("secret").hide(true));
        let page = cli_markdown(command, "A tool.");
        assert!(
            page.starts_with("# `tool` command line\n\nA tool.\n"),
            "{page}"
        );
        assert!(page.contains("- [`tool alpha`](#tool-alpha)\n"), "{page}");
        assert!(
            page.contains("  - [`tool alpha deep`](#tool-alpha-deep)\n"),
            "{page}"
        );
        assert!(
            page.contains(
                "## `tool alpha`\n\n```text\nthe first\n\nUsage: tool alpha [OPTIONS] [COMMAND]"
            ),
            "{page}"
        );
        assert!(page.contains("--name <name>"), "{page}");
        // an environment variable is named, never its value where the test runs
        assert!(page.contains("[env: PATH]"), "{page}");
        assert!(!page.contains("[env: PATH="), "{page}");
        assert!(page.contains("Usage: tool alpha deep"), "{page}");
        assert!(
            !page.contains("secret"),
            "a hidden command is left out: {page}"
        );
        assert!(!page.contains("## `tool help`"), "{page}");
    }

    #[test]
    fn anchors_are_mdbooks() {
        assert_eq!(anchor("oi cluster rotate-ca"), "oi-cluster-rotate-ca");
        assert_eq!(anchor("`oi get` and -o"), "oi-get-and--o");
    }
}
