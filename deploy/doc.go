// Package deploy holds ready-made monitoring for a MegaFlow cluster, as
// files rather than code: prometheus/prometheus.yml (scrape configuration),
// prometheus/alerts.yml (alert rules after the paper's monitoring) and
// grafana/megaflow.json (a Grafana dashboard). Its test checks them with
// promtool and against the metrics the daemons export. Nothing imports it.
package deploy
