package scheduler

import (
	"strings"
	"testing"
)

func TestParseQueuePolicies(t *testing.T) {
	cases := []struct {
		weights, strategies string
		want                map[string]QueuePolicy
		err                 string
	}{
		{"", "", nil, ""},
		{"train=2,eval=1", "", map[string]QueuePolicy{"train": {Weight: 2}, "eval": {Weight: 1}}, ""},
		{"train=3", "train=binpack,default=binpack", map[string]QueuePolicy{"train": {Weight: 3, Strategy: BinPack}, "": {Strategy: BinPack}}, ""},
		{"train", "", nil, `queue weight "train"`},
		{"train=0", "", nil, "from 1 to 1000"},
		{"", "eval=tight", nil, `queue strategy "eval=tight"`},
	}
	for _, tc := range cases {
		var p Policy
		err := p.ParseQueuePolicies(tc.weights, tc.strategies)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%q %q: err %v, want %q", tc.weights, tc.strategies, err, tc.err)
			}
			continue
		}
		if err != nil || len(p.Queues) != len(tc.want) {
			t.Errorf("%q %q: %v, err %v", tc.weights, tc.strategies, p.Queues, err)
		}
		for q, w := range tc.want {
			if p.Queues[q] != w {
				t.Errorf("%q %q: queue %q = %+v, want %+v", tc.weights, tc.strategies, q, p.Queues[q], w)
			}
		}
	}
}
