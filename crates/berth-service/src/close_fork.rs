//! Ending and continuing sessions: close, delete (log erased, then the record), fork
//! (a new session from a prefix of the log), and the admin's audited reopen.

use super::*;

impl SessionService {
    pub async fn close(
        &self,
        principal: &Principal,
        id: &SessionId,
        policy: ClosePolicy,
        expected_revision: Option<Revision>,
    ) -> Result<SessionRecord> {
        let audit = |record: &SessionRecord, cancelled: &Vec<RunRecord>| {
            let mut drafts: Vec<AuditDraft> = cancelled
                .iter()
                .map(|run| {
                    let details = serde_json::json!({"run": run.run_id, "status": "cancelled"});
                    self.draft_ok(principal, "detach", record, details)
                })
                .collect();
            let details = serde_json::json!({"cancelled_runs": cancelled.len()});
            drafts.push(self.draft_ok(principal, "close", record, details));
            drafts
        };
        let (record, cancelled) = self
            .mutate_audited(
                principal,
                id,
                "close",
                expected_revision,
                |record, now| {
                    if record.status.is_terminal() {
                        return Err(Error::Terminal { state: record.status.to_string() });
                    }
                    let mut cancelled = Vec::new();
                    if !record.runs.is_empty() {
                        if policy == ClosePolicy::Refuse {
                            return Err(Error::Busy {
                                id: record.header.id.to_string(),
                                reason: format!(
                                    "{} run(s) attached; detach them or close with cancel_runs",
                                    record.runs.len()
                                ),
                            });
                        }
                        for mut run in record.runs.drain(..) {
                            run.status = RunStatus::Cancelled;
                            cancelled.push(run);
                        }
                    }
                    let next = lifecycle::transition(record.lifecycle(), LifecycleEvent::Close, now)?;
                    record.status = next.status;
                    record.status_changed_at = now;
                    Ok(cancelled)
                },
                &audit,
            )
            .await?;
        self.close_writer(&record.key()).await;
        drop(cancelled);
        Ok(record)
    }

    pub async fn delete(
        &self,
        principal: &Principal,
        id: &SessionId,
        expected_revision: Option<Revision>,
    ) -> Result<()> {
        let record = self.load(principal, id, "delete").await?;
        if let Some(expected) = expected_revision {
            if expected != record.revision {
                return Err(Error::RevisionConflict { expected: expected.0, actual: record.revision.0 });
            }
        }
        let key = record.key();
        self.close_writer(&key).await;
        let size_bytes = self.stored_bytes(&key).await?;
        let memory_items = self.catalog.memory_bound_count(&key.tenant, &key.id).await?;
        self.store.erase(&key).await.map_err(crate::writers::held_elsewhere)?;
        let details = serde_json::json!({
            "events": record.event_count,
            "bytes": size_bytes,
            "status": record.status,
            "owner": record.header.scope.user,
            "memory_items": memory_items,
        });
        let audit = self.draft_ok(principal, "delete", &record, details);
        self.remove_record_after_erase(&key, record.revision, audit).await
    }

    /// Removes a session's record once its log is erased. The erase is the point of no
    /// return, so a concurrent metadata change (a heartbeat, a reopen) must not leave a
    /// record without a log: retry the compare-and-set against the fresh revision.
    /// The removal and its audit record are one catalog transaction.
    pub(crate) async fn remove_record_after_erase(
        &self,
        key: &SessionKey,
        mut revision: Revision,
        audit: AuditDraft,
    ) -> Result<()> {
        for _ in 0..CAS_RETRIES_MAX {
            match self.catalog.remove_audited(key, revision, vec![audit.clone()]).await {
                Ok(_) => return Ok(()),
                Err(Error::NotFound { .. }) => {
                    // Removed meanwhile (by the sweeper, which audited its own removal):
                    // this delete still leaves its record.
                    self.audit(audit).await;
                    return Ok(());
                }
                Err(Error::RevisionConflict { actual, .. }) => revision = Revision(actual),
                Err(error) => return Err(error),
            }
        }
        Err(Error::Unavailable { reason: "metadata kept changing while deleting; retry the delete".into() })
    }

    /// Forks `id` at `upto_seq` (default: the whole log) into a new session of the same
    /// scope whose header records the parent and cut. Allowed from closed and expired
    /// sessions: the explicit way to continue a finished conversation.
    pub async fn fork(
        &self,
        principal: &Principal,
        id: &SessionId,
        upto_seq: Option<u64>,
        new_id: Option<SessionId>,
    ) -> Result<SessionRecord> {
        self.fork_with(principal, id, ForkSession { upto_seq, new_id, ..ForkSession::default() }).await
    }

    /// [`fork`](Self::fork) with the new session's owner, policy, title and labels of its
    /// own. A fork at `0` inherits no events and gets no seam marker: an empty session
    /// whose header names its parent, for a drop-in to write a conversation in its own
    /// layout and policy (continuing another framework's session).
    pub async fn fork_with(&self, principal: &Principal, id: &SessionId, fork: ForkSession) -> Result<SessionRecord> {
        let ForkSession { upto_seq, new_id, user, policy, title, labels } = fork;
        let source = self.load(principal, id, "fork").await?;
        if let Some(user) = &user {
            if *user != source.header.scope.user && !principal.is_privileged() {
                let error = Error::Forbidden {
                    reason: "only service and admin principals fork a session to another user".into(),
                };
                return Err(self.denied(principal, "fork", id, error).await);
            }
        }
        let handle = self.store.open(&source.key(), Access::Read).await?;
        let all = handle.read(0, upto_seq).await;
        let _ = handle.close().await;
        let mut events = all?;
        // A fork is a new session with its own keys: the copied events lose their marks.
        idempotency::strip(&mut events);
        let cut = events.len() as u64;
        if let Some(upto) = upto_seq {
            if upto > cut {
                // The request is well formed; the log is shorter than it says (409, like an
                // append at a seq the log has not reached).
                return Err(Error::SeqConflict { expected: cut, actual: upto });
            }
        }
        let now = self.now();
        let mut scope = source.header.scope.clone();
        if let Some(user) = user {
            scope.user = user;
        }
        let mut header = SessionHeader::new(new_id.unwrap_or_else(|| SessionId::generate(now)), scope, now);
        header.parent = Some(ParentRef { session: source.header.id.clone(), cut_seq: cut });
        header.origin = Some("fork".into());
        header.delegation_depth = source.header.delegation_depth;
        header.policy = policy.unwrap_or_else(|| source.header.policy.clone());
        header.validate()?;
        let serial = |policy: &berth_core::SessionPolicy| matches!(policy.concurrency, berth_core::Concurrency::Serial);
        if cut > 0 && serial(&header.policy) != serial(&source.header.policy) {
            // Copied events keep their runs as stored: a serial log's may have none, which
            // a parallel session refuses, so only an empty fork changes the mode.
            let mode = |policy: &berth_core::SessionPolicy| if serial(policy) { "serial" } else { "parallel" };
            return Err(Error::InvalidTransition {
                from: mode(&source.header.policy).into(),
                event: format!(
                    "a fork copying {cut} events into a {} session (fork at 0 to change the concurrency mode)",
                    mode(&header.policy)
                ),
            });
        }
        let title = title.or_else(|| source.title.clone());
        let labels = labels.unwrap_or_else(|| source.labels.clone());
        crate::sessions::validate_metadata(title.as_deref(), &labels)?;
        let last_time = events.last().map_or(now, |event| event.time);
        // Every event of a parallel session carries a run (R-C3), so there the seam
        // marker carries a fresh run id of its own: the fork operation's, never attached.
        let seed_run = match header.policy.concurrency {
            berth_core::Concurrency::Parallel { .. } => Some(berth_core::RunId::generate(now)),
            berth_core::Concurrency::Serial => None,
        };
        if upto_seq != Some(0) {
            events.push(Event {
                seq: Seq(cut),
                event_type: EventType::parse(berth_core::vocabulary::SESSION_END_SEED).expect("reserved type"),
                time: last_time,
                run: seed_run,
                data: berth_core::JsonText::from(
                    &serde_json::json!({"inherited_events": cut, "parent": source.header.id}),
                ),
                ignorable: false,
                idempotency: None,
            });
        }
        let mut record = new_record(header, title, labels, now);
        record.event_count = events.len() as u64;
        record.blank = !events.iter().any(|e| berth_core::vocabulary::is_conversation_event(e.event_type.as_str()));
        let forked = |fork: &SessionRecord| {
            vec![self.draft_ok(
                principal,
                "forked",
                &source,
                serde_json::json!({"fork": fork.header.id, "cut_seq": cut}),
            )]
        };
        self.create_from_record(principal, record, &events, "fork", forked).await
    }

    /// Admin only: the one audited way out of `closed` / `expired`.
    pub async fn reopen(&self, principal: &Principal, id: &SessionId) -> Result<SessionRecord> {
        if let Err(error) = principal.require_admin("reopen") {
            return Err(self.denied(principal, "reopen", id, error).await);
        }
        let reopen = |record: &mut SessionRecord, now| {
            let ttl_ms = record.header.policy.activity_ttl_ms;
            let next = lifecycle::transition(record.lifecycle(), LifecycleEvent::Reopen { ttl_ms }, now)?;
            record.status = next.status;
            record.lease_until = next.lease_until;
            record.status_changed_at = now;
            Ok(())
        };
        let audit =
            |record: &SessionRecord, _: &()| vec![self.draft_ok(principal, "reopen", record, serde_json::json!({}))];
        let (record, ()) = self.mutate_audited(principal, id, "reopen", None, reopen, &audit).await?;
        Ok(record)
    }
}
