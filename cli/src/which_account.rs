//! Which account a command acts for when `--account` may be left out ([`choose`]): the same rule
//! for every command, user and system mode alike.

use glovebox_config::StateDir;

/// Which account a command acts for, when `--account` may be left out: the one named, else the
/// only account, else the one named after the user running glovebox. `accounts` are every
/// account's ids (glovebox.yaml's and those added at run time).
pub(crate) fn choose(
    accounts: &[String],
    named: Option<String>,
    me: &str,
) -> Result<String, String> {
    let listed = || accounts.join(", ");
    match named {
        Some(id) if accounts.contains(&id) => Ok(id),
        Some(id) if accounts.is_empty() => Err(format!("no account {id:?}: {NO_ACCOUNTS_YET}")),
        Some(id) => Err(format!("no account {id:?} (accounts: {})", listed())),
        None => match accounts {
            [] => Err(NO_ACCOUNTS_YET.to_owned()),
            [only] => Ok(only.clone()),
            _ if accounts.iter().any(|a| a == me) => Ok(me.to_owned()),
            _ => Err(format!(
                "several accounts ({}): choose one with --account",
                listed()
            )),
        },
    }
}

/// What every command says when there is no account at all.
pub(crate) const NO_ACCOUNTS_YET: &str = "no accounts yet: add one with `glovebox account add ID \
     --workdir DIR` (in system mode, as root, with --run-as USER --owner USER too)";

/// [`choose`] among the accounts of the state's `glovebox.yaml` and `accounts.yaml`.
pub(crate) fn choose_in(state: &StateDir, named: Option<String>) -> anyhow::Result<String> {
    let config = state.load_merged_config()?;
    let ids: Vec<String> = config.accounts.iter().map(|a| a.id.to_string()).collect();
    choose(
        &ids,
        named,
        &glovebox_supervisor::init::default_account_name(),
    )
    .map_err(anyhow::Error::msg)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_account_left_out_is_the_only_one_or_the_users_own() {
        let ids = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        type Case<'a> = (&'a [&'a str], Option<&'a str>, Result<&'a str, &'a str>);
        let cases: &[Case] = &[
            (&["a"], None, Ok("a")),
            (&["a", "me"], None, Ok("me")),
            (&["a", "b"], Some("b"), Ok("b")),
            (
                &["a", "b"],
                None,
                Err("several accounts (a, b): choose one with --account"),
            ),
            (&["a"], Some("z"), Err("no account \"z\" (accounts: a)")),
            (
                &[],
                None,
                Err("no accounts yet: add one with `glovebox account add"),
            ),
            (&[], Some("z"), Err("no account \"z\": no accounts yet")),
        ];
        for (accounts, named, want) in cases {
            let got = choose(&ids(accounts), named.map(str::to_owned), "me");
            match (want, &got) {
                (Ok(w), Ok(g)) => assert_eq!(w, g),
                (Err(w), Err(g)) => assert!(g.starts_with(w), "{accounts:?} {named:?}: {g}"),
                _ => panic!("{accounts:?} {named:?}: {got:?}"),
            }
        }
    }
}
