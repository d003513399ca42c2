package obs

import (
	"context"
	"fmt"
	"net/http"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Families is one scrape of a /metrics page, by metric family name.
type Families map[string]*dto.MetricFamily

// Scrape reads and parses the Prometheus text page at url (a daemon's
// /metrics). Tests and tools call it; errors name the url.
func Scrape(ctx context.Context, url string) (Families, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "text/plain; version=0.0.4") // the classic text format
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("scrape %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("scrape %s: HTTP %s", url, resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("scrape %s: %w", url, err)
	}
	return Families(fams), nil
}

// Sum adds up the series of family name whose labels include every
// key=value pair of labels ("k1", "v1", "k2", "v2" ...): the value of
// counters, gauges and untyped series, the sample count of histograms and
// summaries. found is false when no series matched.
func (f Families) Sum(name string, labels ...string) (total float64, found bool) {
	mf := f[name]
	if mf == nil {
		return 0, false
	}
	for _, m := range mf.GetMetric() {
		if !hasLabels(m, labels) {
			continue
		}
		found = true
		switch {
		case m.Counter != nil:
			total += m.GetCounter().GetValue()
		case m.Gauge != nil:
			total += m.GetGauge().GetValue()
		case m.Histogram != nil:
			total += float64(m.GetHistogram().GetSampleCount())
		case m.Summary != nil:
			total += float64(m.GetSummary().GetSampleCount())
		case m.Untyped != nil:
			total += m.GetUntyped().GetValue()
		}
	}
	return total, found
}

func hasLabels(m *dto.Metric, kv []string) bool {
	for i := 0; i+1 < len(kv); i += 2 {
		ok := false
		for _, l := range m.GetLabel() {
			if l.GetName() == kv[i] && l.GetValue() == kv[i+1] {
				ok = true
				break
			}
		}
		if !ok {
			return false
		}
	}
	return true
}
