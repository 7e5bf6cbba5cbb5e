package rrazure_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/readrecovery/readrecovery"
	rrazure "github.com/readrecovery/readrecovery/azure"
)

// waitingJournal is a journal whose Begin waits, until its context ends,
// for another worker's request in flight.
type waitingJournal struct{}

func (waitingJournal) Admit(context.Context, time.Time) error { return nil }
func (waitingJournal) Begin(ctx context.Context, _ readrecovery.JournalRequest) error {
	<-ctx.Done()
	return fmt.Errorf("journal: not begun while another worker's request was in flight: %w", ctx.Err())
}
func (waitingJournal) Complete(context.Context, readrecovery.JournalRequest, readrecovery.JournalOutcome) error {
	return nil
}
func (waitingJournal) Backoff(context.Context, readrecovery.JournalRequest, readrecovery.JournalOutcome, readrecovery.RetryAfter, *readrecovery.RetryAfterTiming) (string, error) {
	return "", nil
}

// The stop is visible through azcore (issue 28): a PUT whose journal waits
// until the sequence's total runs out ends, through a pipeline with
// [rrazure.Apply]'s options, with an error that matches ErrSequenceStopped
// (reason total-exhausted) and context.Canceled both — azcore's retry policy
// alone would return the bare context.Canceled. A caller's own
// cancellation stays the bare context error, and nothing reaches the
// server.
func TestStopVisibleThroughAzcore(t *testing.T) {
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request, n int) { w.WriteHeader(http.StatusCreated) })
	pl := newPipeline(rrazure.ClientOptions())

	b := readrecovery.NewBudget("upload", readrecovery.MaxTotal(300*time.Millisecond))
	ctx := readrecovery.WithJournal(readrecovery.WithBudget(context.Background(), b), waitingJournal{})
	_, err := send(ctx, pl, http.MethodPut, srv.URL+"/c/b", []byte("x"))
	var se *readrecovery.StopError
	if !errors.Is(err, readrecovery.ErrSequenceStopped) || !errors.As(err, &se) || se.Reason != readrecovery.StopTotalExhausted {
		t.Fatalf("err = %v (%T), want a total-exhausted stop", err, err)
	}
	if !errors.Is(err, context.Canceled) {
		t.Errorf("err = %v: want context.Canceled kept", err)
	}

	cctx, cancel := context.WithCancel(readrecovery.WithJournal(readrecovery.WithBudget(context.Background(), readrecovery.NewBudget("mine")), waitingJournal{}))
	time.AfterFunc(100*time.Millisecond, cancel)
	_, err = send(cctx, pl, http.MethodPut, srv.URL+"/c/b", []byte("x"))
	if !errors.Is(err, context.Canceled) || errors.Is(err, readrecovery.ErrSequenceStopped) {
		t.Errorf("caller's cancellation: err = %v, want the bare context.Canceled", err)
	}
	if got := srv.count(""); got != 0 {
		t.Errorf("the server saw %d requests, want 0", got)
	}
}
