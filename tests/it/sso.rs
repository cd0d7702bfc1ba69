//! Single sign-on (`[dashboard.oidc]`) end to end: replicas whose
//! dashboards sign people in through a real OpenID provider
//! (`support::OidcProvider`, npm's oidc-provider) in headless Chromium,
//! through the provider's own login and consent pages. The mapped role
//! decides the buttons and the actions (recorded as `sso EMAIL`); a
//! sign-in made on one replica is taken by another; a logout deletes it
//! and ends the provider's too; an expired sign-in leads back to the
//! login; ID tokens with a wrong audience, expired or tampered with, and
//! an answer naming another issuer (a mix-up), are refused with the
//! reason; and the section's mistakes are named.

use std::collections::BTreeMap;
use std::net::TcpListener;
use std::os::unix::fs::PermissionsExt as _;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::dashboard::{TOKEN, TOKEN_ENV, eventually, goto, js};
use crate::support::{
    Browser, Cluster, ConfigFile, OidcProvider, RedisServer, cronlease_with_env, http,
};

/// The client secret every test client shares.
const SECRET: &str = "sso-test-client-secret-0123456789";
/// A schedule that does not fire while a test runs (midnight, 1 January).
const NEVER: &str = "0 0 1 1 *";

/// The replicas: name, client id at the provider, sign-in lifetime.
const REPLICAS: [(&str, &str, &str); 7] = [
    ("a", "cronlease", "8h"),
    ("b", "cronlease", "8h"),
    ("short", "cronlease", "3s"),
    ("wrong-aud", "cronlease-wrong-aud", "8h"),
    ("expired", "cronlease-expired", "8h"),
    ("tampered", "cronlease-tampered", "8h"),
    ("mixup", "cronlease-mixup", "8h"),
];

/// The cluster, the provider and each replica's `http://127.0.0.1:PORT`.
struct Setup {
    cluster: Cluster,
    provider: OidcProvider,
    bases: BTreeMap<&'static str, String>,
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free loopback port")
        .port()
}

/// The job table with `[dashboard.oidc]` for `client_id` at `issuer`.
fn table(
    secret_file: &std::path::Path,
    issuer: &str,
    client_id: &str,
    base: &str,
    lifetime: &str,
) -> String {
    format!(
        "[jobs.reports]\nschedule = \"{NEVER}\"\nworkdir = \"/tmp\"\ncommand = [\"true\"]\n\n\
         [dashboard.oidc]\nissuer = \"{issuer}\"\nclient_id = \"{client_id}\"\n\
         client_secret_file = \"{}\"\npublic_url = \"{base}\"\n\
         scopes = [\"openid\", \"email\", \"groups\"]\nrole_claim = \"groups\"\nlifetime = \"{lifetime}\"\n\n\
         [[dashboard.oidc.roles]]\nvalue = \"cron-admins\"\nrole = \"admin\"\n\n\
         [[dashboard.oidc.roles]]\nvalue = \"cron-operators\"\nrole = \"operator\"\n\n\
         [[dashboard.oidc.roles]]\nvalue = \"cron-viewers\"\nrole = \"viewer\"\n",
        secret_file.display()
    )
}

/// The provider and the six replicas, each dashboard on a port chosen
/// here (the provider must know the redirect URIs first).
fn start() -> Setup {
    let ports: Vec<u16> = REPLICAS.iter().map(|_| free_port()).collect();
    let bases: BTreeMap<&'static str, String> = REPLICAS
        .iter()
        .zip(&ports)
        .map(|((name, _, _), port)| (*name, format!("http://127.0.0.1:{port}")))
        .collect();
    let provider = OidcProvider::start(SECRET, &bases.values().cloned().collect::<Vec<_>>());
    let mut cluster = Cluster::new(RedisServer::start());
    cluster.env.push((TOKEN_ENV.into(), TOKEN.into()));
    let secret_file = cluster.path("oidc.secret");
    std::fs::write(&secret_file, format!("{SECRET}\n")).expect("the secret file");
    std::fs::set_permissions(&secret_file, std::fs::Permissions::from_mode(0o600))
        .expect("chmod 600");
    for ((name, client_id, lifetime), port) in REPLICAS.iter().zip(&ports) {
        let daemon = format!(
            "metrics_listen = \"\"\ndashboard_listen = \"127.0.0.1:{port}\"\n\
             dashboard_token_env = \"{TOKEN_ENV}\"\ndashboard_read = \"token\"\n"
        );
        let jobs = table(
            &secret_file,
            provider.issuer(),
            client_id,
            &bases[name],
            lifetime,
        );
        cluster.start_with(name, &daemon, &jobs, None);
    }
    cluster.wait_ready();
    Setup {
        cluster,
        provider,
        bases,
    }
}

/// Follows the browser through the provider's pages (its login form as
/// `user`, its consent, its logout confirmation) until it is back on the
/// dashboard at `base`; the URL it ends on.
async fn through_provider(browser: &Browser, base: &str, user: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(60);
    let home = format!("{base}/");
    let step = format!(
        r#"if (document.readyState !== 'complete' || window.__stepped) return 'wait';
        const act = (el) => {{ window.__stepped = true; el.click(); }};
        const login = document.querySelector('input[name=login]');
        if (login) {{
            login.value = '{user}';
            document.querySelector('input[name=password]').value = 'any password';
            act(login.form.querySelector('button[type=submit]'));
            return 'login';
        }}
        const out = document.querySelector('button[name=logout][value=yes]');
        if (out) {{ act(out); return 'logout'; }}
        const consent = document.querySelector('input[name=prompt][value=consent]');
        if (consent) {{ act(consent.form.querySelector('button[type=submit]')); return 'consent'; }}
        return 'wait';"#
    );
    loop {
        let url = browser
            .client
            .current_url()
            .await
            .expect("the browser's URL")
            .to_string();
        if url.starts_with(&home) {
            // The browser's URL can be the next page's while the document
            // is still the provider's: the document's own URL says which.
            let ready: bool = js(
                browser,
                &format!(
                    "return document.readyState === 'complete' && location.href.startsWith({home:?});"
                ),
            )
            .await;
            if ready {
                return url;
            }
        } else {
            let _: String = js(browser, &step).await;
        }
        assert!(
            Instant::now() < deadline,
            "still at {url} after a minute at the provider"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Signs `user` in at `base` from its login page's single sign-on link;
/// where the browser ends.
async fn sign_in(browser: &Browser, base: &str, user: &str) -> String {
    goto(browser, &format!("{base}/login")).await;
    let _: bool = js(
        browser,
        "document.querySelector('#sso').click(); return true;",
    )
    .await;
    // The link leads away from the dashboard first.
    left(browser, &format!("{base}/login"), "the provider's page").await;
    through_provider(browser, base, user).await
}

/// Waits until the browser is at a URL that does not start with `prefix`.
async fn left(browser: &Browser, prefix: &str, what: &str) {
    eventually(what, async || {
        let url = browser.client.current_url().await.ok()?.to_string();
        (!url.starts_with(prefix)).then_some(())
    })
    .await;
}

/// The signed-in identity and role the page's header shows, if any.
async fn header(browser: &Browser) -> Option<(String, String)> {
    js(
        browser,
        r#"const who = document.querySelector('#identity');
        return who ? [who.textContent, document.querySelector('.badge.role').textContent] : null;"#,
    )
    .await
}

/// The count of sign-in records in Redis.
fn sign_ins(setup: &Setup) -> usize {
    let mut redis = setup.cluster.redis.client();
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("cl:sso:*")
        .query(&mut redis)
        .expect("KEYS");
    keys.len()
}

/// The actions recorded on `job`, as the API shows them to the daemon's
/// token.
fn actions(base: &str, job: &str) -> String {
    let addr = base.trim_start_matches("http://");
    let answer = http::get(
        addr,
        addr,
        &format!("/api/v1/jobs/{job}"),
        &format!("Authorization: Bearer {TOKEN}\r\n"),
    );
    let body: Value = serde_json::from_str(&answer.body).unwrap_or(Value::Null);
    body["actions"].to_string()
}

#[test]
fn a_person_signs_in_through_the_provider_acts_with_the_mapped_role_and_signs_out() {
    let setup = start();
    let (a, b) = (&setup.bases["a"], &setup.bases["b"]);
    crate::support::runtime().block_on(async {
        let browser = Browser::start().await;
        // Reading needs a sign-in: the overview leads to the login page.
        goto(&browser, &format!("{a}/")).await;
        let url = browser
            .client
            .current_url()
            .await
            .expect("a URL")
            .to_string();
        assert!(url.starts_with(&format!("{a}/login")), "{url}");

        let landed = sign_in(&browser, a, "alice").await;
        assert_eq!(
            landed,
            format!("{a}/"),
            "back where the login was asked for"
        );
        assert_eq!(
            header(&browser).await,
            Some(("alice@example.com".into(), "operator".into()))
        );
        // Another replica takes the sign-in (read from Redis).
        goto(&browser, &format!("{b}/")).await;
        assert_eq!(
            header(&browser).await,
            Some(("alice@example.com".into(), "operator".into())),
            "replica b does not take a's sign-in"
        );
        assert_eq!(sign_ins(&setup), 1);
        // The API reads with the sign-in's cookie as the pages do.
        let status: u16 = js(
            &browser,
            "return fetch('/api/v1/jobs/reports').then(r => r.status);",
        )
        .await;
        assert_eq!(status, 200, "the API with the sign-in");

        // An operator runs the job; the action is recorded with the identity.
        goto(&browser, &format!("{a}/jobs/reports")).await;
        let _: bool = js(
            &browser,
            "document.querySelector('#run-now').click(); return true;",
        )
        .await;
        let recorded = eventually("the recorded trigger", async || {
            let recorded = actions(a, "reports");
            recorded
                .contains("sso alice@example.com")
                .then_some(recorded)
        })
        .await;
        assert!(
            recorded.contains("sso alice@example.com via dashboard on a from 127.0.0.1"),
            "{recorded}"
        );

        // Logout: the record is deleted, the provider's sign-in ended, and
        // the browser is back on the login page.
        goto(&browser, &format!("{a}/")).await;
        let _: bool = js(
            &browser,
            "document.querySelector('form[action=\"/logout\"]').submit(); return true;",
        )
        .await;
        left(&browser, &format!("{a}/"), "the provider's logout").await;
        let after = through_provider(&browser, a, "alice").await;
        assert!(after.starts_with(&format!("{a}/login")), "{after}");
        assert_eq!(
            sign_ins(&setup),
            0,
            "the sign-in's record outlived the logout"
        );
        goto(&browser, &format!("{b}/")).await;
        assert_eq!(
            header(&browser).await,
            None,
            "b still signed in after the logout"
        );

        // A viewer: no action button.
        sign_in(&browser, a, "victor").await;
        assert_eq!(
            header(&browser).await,
            Some(("victor@example.com".into(), "viewer".into()))
        );
        goto(&browser, &format!("{a}/jobs/reports")).await;
        let buttons: usize = js(
            &browser,
            "return document.querySelectorAll('#run-now, #pause, #resume, button.kill').length;",
        )
        .await;
        assert_eq!(buttons, 0, "a viewer's job page has action buttons");
        browser
            .client
            .delete_all_cookies()
            .await
            .expect("cookies deleted");
        assert_eq!(sign_ins(&setup), 1, "victor's sign-in");

        // A person whose groups map to no role.
        let at = sign_in(&browser, a, "nora").await;
        let refusal: String = js(
            &browser,
            "return document.querySelector('#refusal')?.textContent ?? '';",
        )
        .await;
        assert!(
            refusal.contains("nora@example.com has no role here"),
            "{at}: {refusal}"
        );
        assert_eq!(sign_ins(&setup), 1, "a refused person has a sign-in");
    });
}

#[test]
fn wrong_audience_expired_or_tampered_id_tokens_and_answers_naming_another_issuer_are_refused() {
    let setup = start();
    crate::support::runtime().block_on(async {
        let browser = Browser::start().await;
        for (replica, reason) in [
            (
                "wrong-aud",
                "the ID token's audience is not this dashboard's client id",
            ),
            ("expired", "the ID token has expired"),
            (
                "tampered",
                "the ID token's signature does not verify against the provider's keys",
            ),
            (
                "mixup",
                "the provider's answer names another issuer (its `iss`) than the configured one",
            ),
        ] {
            let base = &setup.bases[replica];
            let at = sign_in(&browser, base, "alice").await;
            assert!(
                at.starts_with(&format!("{base}/sso/callback")),
                "{replica}: {at}"
            );
            let refusal: String = js(
                &browser,
                "return document.querySelector('#refusal')?.textContent ?? '';",
            )
            .await;
            assert_eq!(refusal, reason, "{replica}");
            assert_eq!(header(&browser).await, None, "{replica}: signed in");
            goto(&browser, &format!("{base}/")).await;
            assert_eq!(header(&browser).await, None, "{replica}: signed in after");
            let index = REPLICAS
                .iter()
                .position(|(name, _, _)| *name == replica)
                .expect("a replica");
            let log = setup.cluster.replicas[index].log();
            assert!(
                log.contains("dashboard sign-in refused") && log.contains(reason),
                "{replica}: the log does not name the reason:\n{log}"
            );
        }
        assert_eq!(sign_ins(&setup), 0, "a refused ID token made a sign-in");
        // Expired sign-ins (the `short` replica's last 3 s) lead back to the login.
        let short = &setup.bases["short"];
        browser
            .client
            .delete_all_cookies()
            .await
            .expect("cookies deleted");
        sign_in(&browser, short, "alice").await;
        assert_eq!(
            header(&browser).await,
            Some(("alice@example.com".into(), "operator".into()))
        );
        eventually("the sign-in's expiry", async || {
            goto(&browser, &format!("{short}/")).await;
            let url = browser.client.current_url().await.ok()?.to_string();
            url.starts_with(&format!("{short}/login")).then_some(())
        })
        .await;
        assert_eq!(header(&browser).await, None);
    });
    let log = setup.cluster.logs();
    assert!(!log.contains(SECRET), "the client secret is in a log");
    drop(setup.provider);
}

#[test]
fn an_oidc_section_with_mistakes_is_refused_with_each_place_and_what_is_valid() {
    let config = ConfigFile::new(
        "[redis]\nurl = \"redis://127.0.0.1:1/0\"\n\n\
         [jobs.x]\nschedule = \"* * * * *\"\nworkdir = \"/tmp\"\ncommand = [\"true\"]\n\n\
         [dashboard.oidc]\nissuer = \"ftp://id.example.com\"\nclient_id = \"cron lease\"\n\
         public_url = \"http://dashboard.example.com\"\nscopes = [\"email\"]\nlifetime = \"0s\"\n\n\
         [[dashboard.oidc.roles]]\nvalue = \"ops\"\nrole = \"root\"\n\n\
         [[dashboard.oidc.roles]]\nvalue = \"ops\"\nrole = \"viewer\"\n\n\
         [[dashboard.oidc.roles]]\nvalue = \"admins\"\nrole = \"admin\"\njobs = [\"billing-*\"]\nzz = 1\n",
    );
    let path = config.path().display().to_string();
    let run = cronlease_with_env(["check", "--config", path.as_str()], &[]);
    assert_eq!(run.code(), Some(2), "{}", run.describe());
    let stderr = run.stderr();
    for expected in [
        "[dashboard.oidc], field `issuer`: invalid URL \"ftp://id.example.com\"",
        "[dashboard.oidc], field `client_id`: invalid value \"cron lease\"",
        "[dashboard.oidc], field `public_url`: invalid URL \"http://dashboard.example.com\"",
        "[dashboard.oidc], field `client_secret_file`: no client secret",
        "[dashboard.oidc], field `scopes`: `openid` is missing",
        "[dashboard.oidc], field `lifetime`:",
        "[[dashboard.oidc.roles]] #1, field `role`: unknown role \"root\"",
        "[[dashboard.oidc.roles]] #2, field `value`: the value \"ops\" is also entry #1's",
        "[[dashboard.oidc.roles]] #3, field `jobs`: an admin acts on the whole cluster",
        "[[dashboard.oidc.roles]] #3, field `zz`: unknown field `zz`, expected one of `value`, `role`, `jobs`",
    ] {
        assert!(
            stderr.contains(expected),
            "missing {expected:?} in:\n{stderr}"
        );
    }
}
