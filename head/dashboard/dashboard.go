// Package dashboard holds the web dashboard's static files (plain HTML,
// JavaScript and CSS, no build step, no external resources), embedded in
// the head binary. The head serves Handler at "/" of its HTTP listener; the
// page reads the head's JSON API (/api/..., see head/dashboard.go) and
// refreshes when /api/events says the table changed. Only head imports it.
package dashboard

import (
	"embed"
	"io/fs"
	"net/http"
)

//go:embed static
var files embed.FS

// Handler serves the dashboard: index.html at "/", the other files by
// name. Unknown paths get 404.
func Handler() http.Handler {
	sub, err := fs.Sub(files, "static")
	if err != nil {
		panic("dashboard: embedded static folder missing: " + err.Error()) // a broken build
	}
	fsrv := http.FileServerFS(sub)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-cache")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.Header().Set("Content-Security-Policy", "default-src 'self'; style-src 'self'; script-src 'self'; connect-src 'self'; img-src 'self' data:")
		fsrv.ServeHTTP(w, r)
	})
}
