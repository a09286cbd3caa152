//! Connection profiles: `?profile=web` connections (browser tabs) get client tools only, desktop
//! connections (the default) get the machine's tools too, and a session keeps its profile.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use glovebox_e2e::{Auth, Client, Glovebox, expect_error, open};
use serde_json::json;

#[tokio::test]
async fn a_web_connection_gets_no_machine_tools() {
    let g = Glovebox::start();
    let mut web = Client::connect(
        &format!("{}?profile=web", g.url),
        Auth::Header(&g.token),
        "agent",
    )
    .await;
    assert_eq!(web.hello_ok["profile"], "web");
    assert_eq!(web.hello_ok["tools"], json!([]));
    let e = expect_error(
        &web.invoke("r", "file_read", json!({"path": "x"})).await,
        "denied",
    );
    assert_eq!(e["rule"], "profile");
    let desktop = g.connect("agent").await;
    assert_eq!(desktop.hello_ok["profile"], "desktop");
    assert!(!desktop.hello_ok["tools"].as_array().unwrap().is_empty());
}

#[tokio::test]
async fn a_session_resumed_with_another_profile_is_refused_with_409() {
    let g = Glovebox::start();
    let web = format!("{}?profile=web&session=tab-1", g.url);
    let desktop = format!("{}?profile=desktop&session=tab-1", g.url);
    assert!(open(&web, Auth::Header(&g.token)).await.is_ok());
    assert!(
        open(&web, Auth::Header(&g.token)).await.is_ok(),
        "same profile resumes"
    );
    assert_eq!(
        open(&desktop, Auth::Header(&g.token)).await.err(),
        Some(409)
    );
    assert_eq!(
        open(&format!("{}?profile=mobile", g.url), Auth::Header(&g.token))
            .await
            .err(),
        Some(400)
    );
    assert_eq!(
        open(
            &format!("{}?profile=web&session=a%20b", g.url),
            Auth::Header(&g.token)
        )
        .await
        .err(),
        Some(400)
    );
    // authentication still comes first: a wrong token is 401 whatever the profile
    assert_eq!(open(&desktop, Auth::Header("wrong")).await.err(), Some(401));
}
