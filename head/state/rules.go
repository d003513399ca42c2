package state

// The rules version in force: which version of the apply rules the table's
// log entries are applied under. It starts at 0 (a log written before rules
// versions existed) and only grows, each step an OpSetRules entry the leader
// commits once every voter can apply the new version (head/fsm.RulesCurrent
// says what each version changed). Every head applies an entry under the
// version in force at that entry's index, on the live path and in a replay
// alike, so heads of two builds compute the same table during a rolling
// upgrade.

// RulesSandboxLost is the first rules version under which a started
// sandbox's lost attempt fails its task (SANDBOX_LOST) instead of
// re-queueing it: heads create sandboxes only from it on.
const RulesSandboxLost uint64 = 2

// metaRules is the meta key of the rules version; absent (0) until set.
const metaRules = "rules"

// Rules returns the rules version in force (0 before any OpSetRules).
func (v *View) Rules() uint64 { return readMeta(v.txn(), metaRules) }

// Rules returns the rules version in force as of this transaction.
func (t *Txn) Rules() uint64 { return readMeta(t.mem, metaRules) }

// SetRules raises the rules version to version and returns the version in
// force afterwards: versions only grow, so a version at or below the
// current one changes nothing (a second leader proposing the same step).
func (t *Txn) SetRules(version uint64) uint64 {
	if cur := readMeta(t.mem, metaRules); version <= cur {
		return cur
	}
	must(t.mem.Insert(tableMeta, &metaRow{Key: metaRules, Value: version}))
	return version
}

// Rules sets the rules version of a snapshot being restored; 0 (a snapshot
// from before rules versions) sets none.
func (r *Restore) Rules(version uint64) error {
	if version == 0 {
		return nil
	}
	return r.mem.Insert(tableMeta, &metaRow{Key: metaRules, Value: version})
}
