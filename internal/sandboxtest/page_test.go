package sandboxtest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/megaflow/megaflow/client"
	"github.com/megaflow/megaflow/internal/errs"
	"github.com/megaflow/megaflow/internal/testcluster"
)

// ListSandboxes pages (no Docker needed): 5 sandboxes read 2 at a time
// come oldest first, each once, over 3 pages; a sandbox created between
// pages comes after the others; a page size out of range and a token no
// answer gave are refused naming them; ListSandboxes (every page) reads
// them all.
func TestSandboxListPages(t *testing.T) {
	c := testcluster.New(t, testcluster.Options{})
	cl := c.Client()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var ids []string
	for i := range 5 {
		s, err := cl.CreateSandbox(ctx, client.SandboxSpec{ID: fmt.Sprintf("sbx-page%d", i), Tenant: "pages", Image: "busybox"})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, s.ID())
	}
	var got []string
	f := client.SandboxFilter{Tenant: "pages", PageSize: 2}
	for pages := 1; ; pages++ {
		page, next, err := cl.ListSandboxesPage(ctx, f)
		if err != nil {
			t.Fatal(err)
		}
		if len(page) > 2 {
			t.Fatalf("page %d has %d sandboxes; want at most 2", pages, len(page))
		}
		for _, s := range page {
			got = append(got, s.GetId())
		}
		if pages == 1 { // one more, created while the listing is under way
			s, err := cl.CreateSandbox(ctx, client.SandboxSpec{ID: "sbx-page5", Tenant: "pages", Image: "busybox"})
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, s.ID())
		}
		if next == "" {
			if pages != 3 {
				t.Fatalf("%d pages (%v); want 3", pages, got)
			}
			break
		}
		f.PageToken = next
	}
	if strings.Join(got, " ") != strings.Join(ids, " ") {
		t.Fatalf("paged listing: %v; want %v, oldest first, each once", got, ids)
	}
	all, err := cl.ListSandboxes(ctx, "pages", false)
	if err != nil || len(all) != len(ids) {
		t.Fatalf("ListSandboxes: %d, %v; want %d", len(all), err, len(ids))
	}
	for _, tc := range []struct {
		f    client.SandboxFilter
		want string
	}{
		{client.SandboxFilter{PageSize: 1001}, "page_size"},
		{client.SandboxFilter{PageSize: -1}, "page_size"},
		{client.SandboxFilter{PageToken: "garbage"}, "page_token"},
		{client.SandboxFilter{PageToken: "12.sbx-UPPER"}, "page_token"},
	} {
		if _, _, err := cl.ListSandboxesPage(ctx, tc.f); !errors.Is(err, errs.ErrInvalidArgument) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ListSandboxesPage(%+v): %v; want InvalidArgument naming %s", tc.f, err, tc.want)
		}
	}
}
