package main

import (
	"fmt"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/megaflow/megaflow/client"
)

func clusterCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "cluster",
		Short: "Show the cluster id, the heads, the leader, the term and the Raft indexes",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, c, done, err := g.dial(cmd)
			if err != nil {
				return err
			}
			defer done()
			st, err := c.ClusterStatus(ctx)
			if err != nil {
				return err
			}
			if g.output == "json" {
				return g.printJSON(st)
			}
			fmt.Fprintf(g.stdout, "cluster %s  rules %d\n", orDash(st.ClusterId), st.Rules)
			fmt.Fprintf(g.stdout, "leader %s (%s)  term %d  commit %d  applied %d  last log %d  snapshot %d  (answered by %s, %s)\n\n",
				orDash(st.LeaderId), orDash(st.LeaderGrpcAddr), st.Term, st.CommitIndex, st.AppliedIndex,
				st.LastLogIndex, st.LastSnapshotIndex, st.HeadId, st.RaftState)
			if st.LeaderId == "" {
				fmt.Fprintln(g.stdout, noLeaderNote(st.HeadId, st.Heads)+"\n")
			}
			tw := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "HEAD\tROLE\tSUFFRAGE\tGOSSIP\tRAFT ADDR\tGRPC ADDR\tVERSION\tRULES")
			for _, h := range st.Heads {
				role := "follower"
				switch {
				case h.Leader:
					role = "leader"
				case h.Id == st.HeadId && st.LeaderId == "":
					role = strings.ToLower(st.RaftState) // candidate, or a follower that knows no leader
				case h.Status == "dead" || h.Status == "left":
					role = "down"
				}
				rules := "-"
				if h.Rules > 0 {
					rules = strconv.FormatUint(h.Rules, 10)
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", h.Id, role, h.Suffrage, h.Status, h.RaftAddr, orDash(h.GrpcAddr), orDash(h.Version), rules)
			}
			return tw.Flush()
		},
	}
	cmd.AddCommand(&cobra.Command{
		Use:   "remove-head ID",
		Short: "Remove a head that is gone for good from the Raft configuration",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, c, done, err := g.dial(cmd)
			if err != nil {
				return err
			}
			defer done()
			if err := c.RemoveHead(ctx, args[0]); err != nil {
				return err
			}
			fmt.Fprintf(g.stdout, "removed head %s\n", args[0])
			return nil
		},
	})
	return cmd
}

// noLeaderNote explains a cluster status without a leader: the table is
// then one head's view, and a leader needs a quorum of the voters.
func noLeaderNote(answeredBy string, heads []*client.HeadInfo) string {
	voters, alive := 0, 0
	var missing []string
	for _, h := range heads {
		if h.Suffrage != "voter" {
			continue
		}
		voters++
		if h.Status == "alive" {
			alive++
		} else {
			missing = append(missing, h.Id)
		}
	}
	need := voters/2 + 1
	note := fmt.Sprintf("no leader: this is head %s's view. A leader needs %d of the %d voting heads; gossip sees %d alive. ", answeredBy, need, voters, alive)
	if alive >= need {
		return note + "An election is probably in progress: try again in a few seconds."
	}
	return note + fmt.Sprintf("Start %d more of the missing heads (%s) with their data dirs; reads work meanwhile with --stale.", need-alive, strings.Join(missing, ", "))
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
