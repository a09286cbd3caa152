//! A future carried to its end even if whoever awaits it stops: polled in place while awaited,
//! and handed to a task of its own, as it stands, if dropped before it finished. Costs nothing
//! beyond a box on the path where its caller waits (a task per call from the start would move
//! every call's end to a task switch).

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

/// See the module doc. Made by [`to_the_end`].
pub struct Shielded<F>
where
    F: Future + Send + 'static,
    F::Output: Send,
{
    /// None once finished.
    future: Option<Pin<Box<F>>>,
    runtime: Option<tokio::runtime::Handle>,
}

/// `future`, carried to its end on the current runtime even if dropped before it finished (its
/// output then goes nowhere).
pub fn to_the_end<F>(future: F) -> Shielded<F>
where
    F: Future + Send + 'static,
    F::Output: Send,
{
    Shielded {
        future: Some(Box::pin(future)),
        runtime: tokio::runtime::Handle::try_current().ok(),
    }
}

impl<F> Future for Shielded<F>
where
    F: Future + Send + 'static,
    F::Output: Send,
{
    type Output = F::Output;

    /// Panics if polled again after it finished, as a future may.
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let Some(future) = self.future.as_mut() else {
            panic!("a shielded future polled after it finished");
        };
        let done = future.as_mut().poll(cx);
        if done.is_ready() {
            self.future = None;
        }
        done
    }
}

impl<F> Drop for Shielded<F>
where
    F: Future + Send + 'static,
    F::Output: Send,
{
    fn drop(&mut self) {
        if let (Some(future), Some(runtime)) = (self.future.take(), self.runtime.as_ref()) {
            runtime.spawn(future);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn finished_in_place_when_awaited_and_in_a_task_when_dropped_half_way() {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let steps = |tx: tokio::sync::mpsc::UnboundedSender<&'static str>| async move {
            let _ = tx.send("started");
            tokio::time::sleep(Duration::from_millis(50)).await;
            let _ = tx.send("finished");
            7
        };
        assert_eq!(to_the_end(steps(tx.clone())).await, 7);
        assert_eq!(rx.try_recv(), Ok("started"));
        assert_eq!(rx.try_recv(), Ok("finished"));
        // Given up on while it sleeps: it still finishes.
        let gave_up = tokio::time::timeout(Duration::from_millis(10), to_the_end(steps(tx))).await;
        assert!(gave_up.is_err());
        assert_eq!(rx.recv().await, Some("started"));
        assert_eq!(rx.recv().await, Some("finished"));
    }
}
