//! A future that is driven by its caller but always finishes: if the caller drops it
//! while it is still pending (an HTTP client that disconnects mid-append), the rest of
//! it moves to a task of its own. The same shape as the store's write
//! (`berth_store::handle::run_to_completion`), for any service call's output.

use berth_core::error::panic_message;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

type Work<T> = Pin<Box<dyn Future<Output = T> + Send>>;

pub(crate) struct ToCompletion<T: Send + 'static> {
    work: Option<Work<T>>,
}

impl<T: Send + 'static> ToCompletion<T> {
    pub(crate) fn new(work: impl Future<Output = T> + Send + 'static) -> ToCompletion<T> {
        ToCompletion { work: Some(Box::pin(work)) }
    }
}

impl<T: Send + 'static> Future for ToCompletion<T> {
    /// The work's output, or the message of a panic inside it.
    type Output = Result<T, String>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let Some(work) = self.work.as_mut() else {
            return Poll::Ready(Err("a service call polled after it completed".into()));
        };
        let outcome = match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| work.as_mut().poll(cx))) {
            Ok(Poll::Pending) => return Poll::Pending,
            Ok(Poll::Ready(output)) => Ok(output),
            Err(panic) => Err(panic_message(&*panic).to_owned()),
        };
        self.work = None;
        Poll::Ready(outcome)
    }
}

impl<T: Send + 'static> Drop for ToCompletion<T> {
    fn drop(&mut self) {
        let Some(work) = self.work.take() else { return };
        // The caller gave up while the call was in flight: finish it in the background
        // (its answer has nobody to go to). Without a runtime nothing drove it either.
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                work.await;
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    /// A call whose caller gives up part-way still runs to its end — the guarantee the
    /// server's `call` keeps for every service operation.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_dropped_call_still_completes() {
        let finished = Arc::new(AtomicBool::new(false));
        let (started_tx, started_rx) = tokio::sync::oneshot::channel();
        let flag = finished.clone();
        let call = ToCompletion::new(async move {
            let _ = started_tx.send(());
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            flag.store(true, Ordering::SeqCst);
        });
        let caller = tokio::spawn(call);
        started_rx.await.expect("the call started");
        caller.abort();
        let _ = caller.await;
        assert!(!finished.load(Ordering::SeqCst), "dropped before its end");
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        assert!(finished.load(Ordering::SeqCst), "finished after its caller was gone");
    }

    #[tokio::test]
    async fn a_panic_is_an_error_not_a_crash() {
        let outcome = ToCompletion::new(async {
            if std::hint::black_box(true) {
                panic!("boom");
            }
        })
        .await;
        assert_eq!(outcome, Err::<(), _>("boom".to_owned()));
    }
}
