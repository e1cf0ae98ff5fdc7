//! Which channels changed between two checkpoints: compared by their `channel_versions`
//! (LangGraph gives a channel a new version whenever it writes it), pure.

use super::decode::CheckpointSummary;

/// One channel whose version differs between two checkpoints.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChannelChange {
    pub channel: String,
    /// Its version in the earlier checkpoint (None: it had none — added).
    pub before: Option<String>,
    /// Its version in the later one (None: it has none — removed).
    pub after: Option<String>,
}

impl ChannelChange {
    pub fn kind(&self) -> &'static str {
        match (&self.before, &self.after) {
            (None, _) => "added",
            (_, None) => "removed",
            _ => "updated",
        }
    }
}

/// The channels of `after` whose version is not the one in `before` (in `after`'s order),
/// then those `before` has and `after` does not.
pub fn changed_channels(before: &CheckpointSummary, after: &CheckpointSummary) -> Vec<ChannelChange> {
    let mut changes: Vec<ChannelChange> = after
        .channel_versions
        .iter()
        .filter_map(|(channel, version)| {
            let earlier = before.version_of(channel);
            (earlier != Some(version.as_str())).then(|| ChannelChange {
                channel: channel.clone(),
                before: earlier.map(str::to_owned),
                after: Some(version.clone()),
            })
        })
        .collect();
    changes.extend(before.channel_versions.iter().filter(|(channel, _)| after.version_of(channel).is_none()).map(
        |(channel, version)| ChannelChange { channel: channel.clone(), before: Some(version.clone()), after: None },
    ));
    changes
}

#[cfg(test)]
mod tests {
    use super::*;

    fn checkpoint(versions: &[(&str, &str)]) -> CheckpointSummary {
        CheckpointSummary {
            channel_versions: versions.iter().map(|(c, v)| (c.to_string(), v.to_string())).collect(),
            ..CheckpointSummary::default()
        }
    }

    #[test]
    fn added_updated_and_removed_channels_are_found_and_unchanged_ones_left_out() {
        let before = checkpoint(&[("messages", "1"), ("branch:to:agent", "1"), ("__start__", "1")]);
        let after = checkpoint(&[("messages", "2"), ("branch:to:agent", "1"), ("branch:to:tools", "2")]);
        let changes = changed_channels(&before, &after);
        let shown: Vec<(&str, &str)> = changes.iter().map(|change| (change.channel.as_str(), change.kind())).collect();
        assert_eq!(shown, [("messages", "updated"), ("branch:to:tools", "added"), ("__start__", "removed")]);
        assert_eq!(changes[0].before.as_deref(), Some("1"));
        assert_eq!(changes[0].after.as_deref(), Some("2"));
        assert!(changed_channels(&after, &after).is_empty());
    }
}
