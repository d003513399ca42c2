package head

import (
	"net/http"
	"net/http/pprof"
)

// pprofSurface is net/http/pprof on the head's HTTP address (Config.Pprof).
var pprofSurface = adminSurface{method: "pprof", name: "/debug/pprof",
	shows: "shows the head's memory, goroutines and command line and costs CPU while it profiles"}

// registerPprof adds net/http/pprof's handlers under /debug/pprof/ to mux
// (the index, every runtime profile by name such as heap, allocs and
// goroutine, and cmdline, profile, symbol and trace), each behind an admin
// token when ACLs are on, as the dashboard's API. New calls it only when
// Config.Pprof is set: a CPU profile or a trace costs the head CPU while it
// runs, and a heap profile stops the world briefly.
func (h *Head) registerPprof(mux *http.ServeMux) {
	guard := func(f http.HandlerFunc) http.HandlerFunc { return h.httpAdmin(pprofSurface, f) }
	mux.HandleFunc("GET /debug/pprof/", guard(pprof.Index))
	mux.HandleFunc("GET /debug/pprof/cmdline", guard(pprof.Cmdline))
	mux.HandleFunc("GET /debug/pprof/profile", guard(pprof.Profile))
	mux.HandleFunc("GET /debug/pprof/symbol", guard(pprof.Symbol))
	mux.HandleFunc("POST /debug/pprof/symbol", guard(pprof.Symbol))
	mux.HandleFunc("GET /debug/pprof/trace", guard(pprof.Trace))
}
