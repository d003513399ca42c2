package tlsconfig

import (
	"context"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
)

// ReloadOnSIGHUP reloads s (ReloadOn) each time the process gets SIGHUP,
// on a goroutine of its own, until the returned stop is called; stop
// stops watching the signal and waits for the goroutine. megaflow-head
// and megaflow-worker call it once TLS is loaded and stop it on exit.
func ReloadOnSIGHUP(s *Store, logger *slog.Logger) (stop func()) {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGHUP)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.ReloadOn(ctx, ch, logger, nil)
	}()
	return func() {
		signal.Stop(ch)
		cancel()
		<-done
	}
}
