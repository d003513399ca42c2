package worker

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/megaflow/megaflow/runtime/contract"
)

// The cluster id. Every cluster's first leader chooses one and keeps it in
// the replicated table; the head sends it in every Welcome
// (wire.Welcome.cluster_id). The worker labels each container it creates
// with it (LabelClusterID) and keeps it in DataDir/cluster-id, so that a
// restarted worker knows it before it connects. Reconciliation and
// adoption touch only containers labelled with this worker's cluster id
// and worker id: two clusters on one container engine, even with equal
// cluster names and worker ids (two `megaflow up` on one host), never
// touch each other's containers.
//
// A worker that does not know its cluster id (a fresh data dir before its
// first Welcome, or a head that sends none) touches only containers with
// no cluster id label: those of such heads, and of versions before cluster
// ids. Containers of those versions are left alone once the id is known;
// remove them by hand (docker rm -f) after an upgrade.

// clusterIDFile is the file in DataDir that keeps the cluster id.
const clusterIDFile = "cluster-id"

// loadClusterID reads DataDir/cluster-id: "" when it does not exist.
func loadClusterID(dataDir string) (string, error) {
	b, err := os.ReadFile(filepath.Join(dataDir, clusterIDFile))
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	id := strings.TrimSpace(string(b))
	if p := labelValueProblem(id); id != "" && p != "" {
		return "", fmt.Errorf("%s: cluster id %q %s", filepath.Join(dataDir, clusterIDFile), id, p)
	}
	return id, nil
}

// clusterID returns the cluster id this worker knows, "" if none. Any
// goroutine may call it.
func (w *Worker) clusterID() string {
	id, _ := w.clusterIDv.Load().(string)
	return id
}

// learnClusterID takes the cluster id of a Welcome: a new one is kept (in
// memory and in DataDir/cluster-id) and labels the containers created from
// now on; "" (a head that sends none) changes nothing. The stream
// goroutine calls it before it handles anything else of the stream.
func (w *Worker) learnClusterID(id string) {
	if id == "" || id == w.clusterID() {
		return
	}
	if p := labelValueProblem(id); p != "" {
		w.log.Warn("ignoring the head's cluster id", "cluster_id", id, "problem", p)
		return
	}
	if old := w.clusterID(); old != "" {
		w.log.Warn("the head's cluster id differs from the one in the data dir: this data dir served another cluster; "+
			"the containers of that one are left alone", "cluster_id", id, "previous", old)
	}
	w.clusterIDv.Store(id)
	path := filepath.Join(w.cfg.DataDir, clusterIDFile)
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(id+"\n"), 0o644); err == nil {
		err = os.Rename(tmp, path)
	} else {
		w.log.Warn("cannot keep the cluster id in the data dir: a restart before the next Welcome will not find this cluster's containers",
			"path", path, "err", err)
	}
	w.log.Info("cluster id", "cluster_id", id)
}

// ownLabels are the labels that mark a container as this worker's (with
// the cluster id once known: see filterOwn).
func (w *Worker) ownLabels() map[string]string {
	l := map[string]string{LabelCluster: w.cfg.ClusterName, LabelWorker: w.cfg.NodeID}
	if id := w.clusterID(); id != "" {
		l[LabelClusterID] = id
	}
	return l
}

// filterOwn drops from cs (listed by ownLabels) the containers of another
// cluster: with no cluster id known, every container that carries one.
func (w *Worker) filterOwn(cs []contract.Container) []contract.Container {
	if w.clusterID() != "" {
		return cs
	}
	out := cs[:0]
	for _, c := range cs {
		if _, other := c.Labels[LabelClusterID]; !other {
			out = append(out, c)
		}
	}
	return out
}

// clusterLabels adds the cluster labels of a new container to l.
func (w *Worker) clusterLabels(l map[string]string) map[string]string {
	l[LabelCluster] = w.cfg.ClusterName
	l[LabelWorker] = w.cfg.NodeID
	if id := w.clusterID(); id != "" {
		l[LabelClusterID] = id
	}
	return l
}
