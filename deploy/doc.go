// Package deploy holds ready-made monitoring for a MegaFlow cluster, as
// files rather than code: prometheus/prometheus.yml (scrape configuration),
// prometheus/alerts.yml (alert rules after the paper's monitoring) and
// grafana/megaflow.json (a Grafana dashboard). Its test checks them with
// promtool and against the metrics the daemons export. config/head.yaml and
// config/worker.yaml are example --config files showing every setting of
// megaflow-head and megaflow-worker (their tests keep them in step with the
// flags; internal/daemonconfig reads them). systemd/ holds the daemons'
// units and debian/ their packages' maintainer scripts, which
// cmd/megaflow-release packages (its test checks them). Nothing imports it.
package deploy
