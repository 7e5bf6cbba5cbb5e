package readrecovery

import (
	"context"
	"errors"
	"time"

	"go.opentelemetry.io/otel/trace"
)

// This file holds what a wait in progress records (waitSpan) and the error
// type a failed wait's span carries; the call's methods that sleep, start
// and end a wait and record a stop are in call.go.

// waitSpan is one wait in progress: its span and what it records.
type waitSpan struct {
	span    trace.Span
	ctx     context.Context
	start   time.Time
	planned time.Duration
	plan    waitPlan
	resend  bool
}

func errorType(err error) string {
	var se *StopError
	switch {
	case errors.As(err, &se):
		return string(se.Reason)
	case errors.Is(err, context.Canceled):
		return "context.Canceled"
	case errors.Is(err, context.DeadlineExceeded):
		return "context.DeadlineExceeded"
	}
	return "error"
}
