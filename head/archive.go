package head

import (
	"context"
	"time"

	"github.com/megaflow/megaflow/head/fsm"
	"github.com/megaflow/megaflow/head/state"
	"github.com/megaflow/megaflow/internal/errs"
	"github.com/megaflow/megaflow/internal/wire"
)

// LabelGraphRetention is the graph label that sets how long a finished
// graph stays in the live table before it is archived, as a Go duration
// ("72h"), overriding Config.GraphRetention; "0" keeps it live.
const LabelGraphRetention = "megaflow.io/graph-retention"

// archiveBatchTasks bounds the task rows one archive command removes
// (a graph with more goes in a command of its own), so that no apply
// holds the table long whatever the graphs' sizes.
const archiveBatchTasks = 1 << 16

// archiveCommands returns the commands that archive the graphs of view
// whose retention has passed at now (graphKeep, or the graph's label
// LabelGraphRetention; 0: kept) and that may be archived now
// (state.View.Archivable: finished, nothing pending on them), and that
// drop the archived summaries older than archiveKeep (0: kept), in
// commands of at most fsm.MaxArchiveBatch graphs and drops each and of at
// most archiveBatchTasks tasks (but for a bigger graph alone), stamped
// with now. A label that does not parse is ignored (graphKeep applies).
// Nil when there is nothing to do. It is pure: the leader's archive loop
// proposes what it returns.
func archiveCommands(view *state.View, now time.Time, graphKeep, archiveKeep time.Duration) []*wire.ArchiveGraphsCommand {
	return archiveCommandsBounded(view, now, graphKeep, archiveKeep, archiveBatchTasks)
}

// archiveCommandsBounded is archiveCommands with commands of at most
// maxTasks tasks (but for a bigger graph alone) instead of
// archiveBatchTasks, so that a test of the bound needs no graphs of 65,536
// tasks.
func archiveCommandsBounded(view *state.View, now time.Time, graphKeep, archiveKeep time.Duration, maxTasks int) []*wire.ArchiveGraphsCommand {
	var due []string
	tasks := map[string]uint32{}
	for g := range view.Graphs() {
		if g.State == wire.GraphState_GRAPH_STATE_RUNNING || g.FinishUnixNanos == 0 {
			continue
		}
		keep, _ := labelRetention(g.Labels, LabelGraphRetention, graphKeep)
		if keep > 0 && now.UnixNano()-g.FinishUnixNanos > int64(keep) {
			due = append(due, g.ID)
			tasks[g.ID] = g.TaskCount
		}
	}
	due = view.Archivable(due)
	var drop []string
	if archiveKeep > 0 {
		for g := range view.ArchivedGraphs() {
			if now.UnixNano()-g.GetArchivedUnixNanos() > int64(archiveKeep) {
				drop = append(drop, g.GetId())
			}
		}
	}
	var out []*wire.ArchiveGraphsCommand
	for len(due) > 0 || len(drop) > 0 {
		cmd := &wire.ArchiveGraphsCommand{UnixNanos: now.UnixNano()}
		n, sum := 0, 0
		for n < len(due) && n < fsm.MaxArchiveBatch && (n == 0 || sum+int(tasks[due[n]]) <= maxTasks) {
			sum += int(tasks[due[n]])
			n++
		}
		cmd.GraphIds, due = due[:n:n], due[n:]
		n = min(len(drop), fsm.MaxArchiveBatch)
		cmd.DropIds, drop = drop[:n:n], drop[n:]
		out = append(out, cmd)
	}
	return out
}

// archiveLoop runs on the leader while it leads (the leader loop owns
// it): every ArchiveSweepInterval, once the table is at rules 5
// (state.RulesArchive), it proposes archiveCommands: finished graphs past
// GraphRetention leave the live table for the archive, and summaries past
// ArchiveRetention leave the archive. It stops at the first proposal that
// fails; the next sweep retries (the FSM re-checks every graph, so a
// repeated or stale command archives nothing twice). With both
// retentions 0 it does nothing.
func (h *Head) archiveLoop(ctx context.Context) {
	if h.cfg.GraphRetention == 0 && h.cfg.ArchiveRetention == 0 {
		return
	}
	tick := time.NewTicker(h.cfg.ArchiveSweepInterval)
	defer tick.Stop()
	for {
		if view := h.fsm.View(); view.Rules() >= state.RulesArchive {
			for _, cmd := range archiveCommands(view, h.clock.Now(), h.cfg.GraphRetention, h.cfg.ArchiveRetention) {
				res, err := h.prop.propose(ctx, fsm.OpArchiveGraphs, cmd)
				if err != nil {
					if ctx.Err() == nil {
						h.logger.Warn("archiving finished graphs failed; next sweep retries", "graphs", len(cmd.GraphIds), "err", err)
					}
					break
				}
				if r, ok := res.(*fsm.ArchiveGraphsResult); ok && (len(r.Archived) > 0 || r.Dropped > 0) {
					h.logger.Info("archived finished graphs", "archived", len(r.Archived), "skipped", len(cmd.GraphIds)-len(r.Archived),
						"summaries_dropped", r.Dropped)
				}
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// archivedError returns the NotFound error of a read of graph id's tasks,
// logs or artifacts when the graph is archived (saying when, and where its
// summary is), or nil when it is not.
func archivedError(view *state.View, id string) error {
	g := view.Archived(id)
	if g == nil {
		return nil
	}
	return errs.New(errs.NotFound, "graph %q was archived at %s: its tasks are no longer kept, nor can its logs and artifacts be read (the head's --graph-retention, "+
		"or the graph's label %s); its summary is in `megaflow status %s`",
		id, time.Unix(0, g.GetArchivedUnixNanos()).UTC().Format(time.RFC3339), LabelGraphRetention, id)
}

// checkRetentionLabels checks a submitted graph's retention labels
// (LabelGraphRetention, LabelArtifactRetention): each, when set, must be a
// Go duration of 0 or more ("72h"; "0" keeps). Errors: InvalidArgument
// naming the label and its value, nothing submitted. A graph committed
// before this check with a bad value keeps the default retention.
func checkRetentionLabels(labels map[string]string) error {
	for _, l := range []string{LabelGraphRetention, LabelArtifactRetention} {
		if _, err := labelRetention(labels, l, 0); err != nil {
			return err
		}
	}
	return nil
}

// archivedCancel reports whether a cancel of graph id (or of one of its
// tasks) that the FSM answered err found the graph archived: it ended, so
// there is nothing to cancel, and the call answers as for any finished
// graph (nothing cancelled), at the table's index. ok is false for any
// other outcome.
func (h *Head) archivedCancel(err error, id string) (index uint64, ok bool) {
	if errs.ClassOf(err) != errs.NotFound {
		return 0, false
	}
	view := h.fsm.View()
	if view.Archived(id) == nil {
		return 0, false
	}
	return view.Index(), true
}
