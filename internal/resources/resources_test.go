package resources

import "testing"

const gib = 1 << 30

func TestArithmetic(t *testing.T) {
	a := Resources{CPUMillis: 2000, MemoryBytes: 4 * gib, GPUs: 1}
	b := Resources{CPUMillis: 500, MemoryBytes: gib, GPUs: 1}
	if got, want := a.Add(b), (Resources{2500, 5 * gib, 2}); got != want {
		t.Errorf("Add = %+v, want %+v", got, want)
	}
	if got, want := a.Sub(b), (Resources{1500, 3 * gib, 0}); got != want {
		t.Errorf("Sub = %+v, want %+v", got, want)
	}
	if got, want := b.Sub(a), (Resources{-1500, -3 * gib, 0}); got != want {
		t.Errorf("Sub below zero = %+v, want %+v", got, want)
	}
	if got := a.Add(b).Sub(b); got != a {
		t.Errorf("Add then Sub = %+v, want %+v", got, a)
	}
}

func TestFitsAndShortfall(t *testing.T) {
	free := Resources{CPUMillis: 4000, MemoryBytes: 8 * gib, GPUs: 2}
	cases := []struct {
		name  string
		req   Resources
		avail Resources
		fits  bool
		short Resources
	}{
		{"zero fits anything", Resources{}, Resources{-1, -1, -1}, true, Resources{}},
		{"exact fit", free, free, true, Resources{}},
		{"smaller", Resources{1000, gib, 1}, free, true, Resources{}},
		{"cpu short", Resources{5000, gib, 0}, free, false, Resources{CPUMillis: 1000}},
		{"memory short", Resources{1000, 9 * gib, 0}, free, false, Resources{MemoryBytes: gib}},
		{"gpus short", Resources{1000, gib, 3}, free, false, Resources{GPUs: 1}},
		{"all short", Resources{5000, 10 * gib, 4}, free, false, Resources{1000, 2 * gib, 2}},
		{"negative avail counts as none", Resources{1000, 0, 0}, Resources{CPUMillis: -500}, false, Resources{CPUMillis: 1000}},
		{"zero dimension ignored when avail negative", Resources{CPUMillis: 1000}, Resources{1000, -gib, -1}, true, Resources{}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.req.Fits(tc.avail); got != tc.fits {
				t.Errorf("Fits = %v, want %v", got, tc.fits)
			}
			if got := tc.req.Shortfall(tc.avail); got != tc.short {
				t.Errorf("Shortfall = %+v, want %+v", got, tc.short)
			}
			if tc.req.Shortfall(tc.avail).IsZero() != tc.fits {
				t.Errorf("Shortfall zero disagrees with Fits")
			}
		})
	}
}

func TestFormat(t *testing.T) {
	cases := []struct{ got, want string }{
		{FormatCPU(1000), "1 core"},
		{FormatCPU(16000), "16 cores"},
		{FormatCPU(1500), "1.5 cores"},
		{FormatCPU(250), "250 millicores"},
		{FormatCPU(1250), "1250 millicores"},
		{FormatBytes(16 * gib), "16 GiB"},
		{FormatBytes(gib + gib/2), "1.5 GiB"},
		{FormatBytes(512 << 20), "512 MiB"},
		{FormatBytes(100), "100 bytes"},
		{FormatBytes(1 << 40), "1 TiB"},
		{FormatGPUs(1, ""), "1 GPU"},
		{FormatGPUs(2, "H100"), "2 H100 GPUs"},
		{Resources{CPUMillis: 2000, MemoryBytes: 16 * gib, GPUs: 1}.String(), "2 cores, 16 GiB, 1 GPU"},
		{Resources{MemoryBytes: gib}.String(), "1 GiB"},
		{Resources{}.String(), "nothing"},
	}
	for _, tc := range cases {
		if tc.got != tc.want {
			t.Errorf("got %q, want %q", tc.got, tc.want)
		}
	}
}
