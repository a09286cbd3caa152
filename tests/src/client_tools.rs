//! A client-tools provider (`/v1/client-tools`, the loomcycle client-tools protocol v1) as a
//! browser extension or an IDE would be one: it opens the socket with its bearer token, registers
//! tools and answers their calls. The end-to-end tests and the comparison benchmark drive it.

use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;

use crate::{Glovebox, WAIT};

type Socket =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

pub struct Provider {
    pub socket: Socket,
    pub protocol: Option<String>,
}

fn endpoint(g: &Glovebox) -> String {
    g.url.replace("/v1/ws", "/v1/client-tools")
}

pub async fn open_provider(g: &Glovebox, token: &str) -> Result<Provider, u16> {
    let mut request = endpoint(g).into_client_request().unwrap();
    request.headers_mut().insert(
        "sec-websocket-protocol",
        format!("loomcycle.client-tools.v1, bearer.{token}")
            .parse()
            .unwrap(),
    );
    match tokio_tungstenite::connect_async(request).await {
        Ok((socket, response)) => Ok(Provider {
            socket,
            protocol: response
                .headers()
                .get("sec-websocket-protocol")
                .map(|v| v.to_str().unwrap().to_owned()),
        }),
        Err(tokio_tungstenite::tungstenite::Error::Http(r)) => Err(r.status().as_u16()),
        Err(e) => panic!("{e}"),
    }
}

impl Provider {
    pub async fn send(&mut self, v: Value) {
        self.socket
            .send(Message::Text(v.to_string().into()))
            .await
            .unwrap();
    }

    pub async fn next(&mut self) -> Value {
        loop {
            let msg = tokio::time::timeout(WAIT, self.socket.next())
                .await
                .expect("provider frame")
                .expect("open")
                .expect("ok");
            match msg {
                Message::Text(t) => return serde_json::from_str(t.as_str()).unwrap(),
                Message::Close(c) => {
                    return json!({"type": "closed", "code": c.map(|c| u16::from(c.code))});
                }
                _ => continue,
            }
        }
    }

    pub async fn register(&mut self, tools: &[&str]) -> Value {
        let tools: Vec<Value> = tools
            .iter()
            .map(|t| json!({"name": t, "description": format!("{t} tool"), "input_schema": {"type": "object"}}))
            .collect();
        self.send(json!({"type": "hello", "client": "test-extension", "tools": tools}))
            .await;
        let ok = self.next().await;
        assert_eq!(ok["type"], "hello_ok", "{ok}");
        ok
    }
}
