package worker

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"slices"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/megaflow/megaflow/internal/wire"
	"github.com/megaflow/megaflow/runtime/contract"
)

// Image advertising: a worker whose runtime lists its images
// (contract.ImageLister, the Docker runtime) tells the head which images it
// holds, so that the scheduler's image locality bonus sees real data. The
// list is read at start, every ImageRefreshInterval, and soon after a
// container of an image not yet advertised started (the engine may have
// pulled it). A changed list goes to the leader in the next heartbeat
// (Heartbeat.info), which the leader commits as a WorkerUpsert.

// Defaults of the image advertising settings.
const (
	// DefaultImageRefreshInterval is how often the image list is re-read.
	DefaultImageRefreshInterval = 30 * time.Second
	// DefaultMaxAdvertisedImages bounds the images advertised: a few
	// hundred tags keep a worker's row (and every plan's input) small.
	DefaultMaxAdvertisedImages = 256
)

// advert is what the worker advertises beyond its static info, guarded by
// Worker.advMu.
type advert struct {
	images []string
	dirty  bool // changed since the leader last got it

	unhealthy   map[string]string // GPU UUID -> why it is unhealthy
	healthDirty bool              // unhealthy changed since the leader last got it
}

// currentInfo returns a copy of the worker's info with the images
// advertised now. Any goroutine may call it.
func (w *Worker) currentInfo() *wire.WorkerInfo {
	info := proto.CloneOf(w.info)
	w.advMu.Lock()
	defer w.advMu.Unlock()
	info.Images = slices.Clone(w.adv.images)
	for _, d := range info.Gpus {
		d.Unhealthy = w.adv.unhealthy[d.GetUuid()]
	}
	return info
}

// takeInfoUpdate returns the info to send to the leader when the
// advertisement changed since the last call, else nil. The stream
// goroutine calls it at each heartbeat.
func (w *Worker) takeInfoUpdate() *wire.WorkerInfo {
	w.advMu.Lock()
	dirty := w.adv.dirty
	w.adv.dirty = false
	w.advMu.Unlock()
	if !dirty {
		return nil
	}
	return w.currentInfo()
}

// markInfoSent clears the changed flag: the Hello of a new stream carries
// the current info.
func (w *Worker) markInfoSent() {
	w.advMu.Lock()
	w.adv.dirty = false
	w.advMu.Unlock()
}

// setImages records the images held; it reports whether the advertised
// list changed. ims must be sorted without duplicates; at most
// MaxAdvertisedImages are kept (the first in sorted order).
func (w *Worker) setImages(ims []string) bool {
	if n := w.cfg.MaxAdvertisedImages; len(ims) > n {
		ims = ims[:n]
	}
	w.advMu.Lock()
	defer w.advMu.Unlock()
	if slices.Equal(w.adv.images, ims) {
		return false
	}
	w.adv.images = slices.Clone(ims)
	w.adv.dirty = true
	return true
}

// advertises reports whether image is in the advertised list.
func (w *Worker) advertises(image string) bool {
	w.advMu.Lock()
	defer w.advMu.Unlock()
	_, ok := slices.BinarySearch(w.adv.images, image)
	return ok
}

// imageStarted is called by an attempt's driver after a container of image
// started: an image not advertised yet triggers a refresh.
func (w *Worker) imageStarted(image string) {
	if image == "" || w.advertises(image) {
		return
	}
	select {
	case w.imagePoke <- struct{}{}:
	default:
	}
}

// imageLoop keeps the advertised images current until ctx ends. Run starts
// it when the runtime is an ImageLister; the first read happens before the
// first Hello where possible (Run waits for it up to CallTimeout).
func (w *Worker) imageLoop(ctx context.Context, lister contract.ImageLister, first chan<- struct{}) {
	refresh := func() {
		cctx, cancel := context.WithTimeout(ctx, w.cfg.CallTimeout)
		defer cancel()
		ims, err := lister.Images(cctx)
		if err != nil {
			if ctx.Err() == nil {
				w.log.Warn("listing the runtime's images failed; the advertised list is kept", "err", err)
			}
			return
		}
		if w.setImages(ims) {
			w.log.Debug("advertised images changed", "images", len(ims))
		}
	}
	refresh()
	close(first)
	for {
		t := w.clock.NewTimer(w.cfg.ImageRefreshInterval)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C():
		case <-w.imagePoke:
			t.Stop()
		}
		refresh()
	}
}

// newInstance names this worker process: "host pid N #random", so that the
// head can tell two processes announcing one worker id apart.
func newInstance() string {
	host, _ := os.Hostname()
	var b [4]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%s pid %d #%s", host, os.Getpid(), hex.EncodeToString(b[:]))
}
