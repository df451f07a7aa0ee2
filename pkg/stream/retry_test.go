package stream

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestRetryOp(t *testing.T) {
	errTransient := errors.New("transient")
	errFinal := errors.New("final")
	retryable := func(err error) bool { return errors.Is(err, errTransient) }
	fast := Backoff{Initial: time.Millisecond, Max: 2 * time.Millisecond}
	for _, tc := range []struct {
		name      string
		b         Backoff
		fail      []error // the answers of the calls before success
		cancelAt  int     // cancel ctx during this call (1-based; 0: never)
		wantCalls int
		wantErr   error
	}{
		{name: "succeeds after transient failures", b: fast, fail: []error{errTransient, errTransient}, wantCalls: 3},
		{name: "final error is not retried", b: fast, fail: []error{errTransient, errFinal, errTransient}, wantCalls: 2, wantErr: errFinal},
		{name: "cancel ends the retries", b: fast, fail: []error{errTransient, errTransient, errTransient, errTransient}, cancelAt: 2, wantCalls: 2, wantErr: context.Canceled},
		{name: "no wait past For", b: Backoff{Initial: time.Hour, Max: time.Hour, For: time.Minute}, fail: []error{errTransient, errTransient}, wantCalls: 1, wantErr: errTransient},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			calls := 0
			v, err := RetryOp(ctx, tc.b, retryable, nil, func(context.Context) (int, error) {
				calls++
				if calls == tc.cancelAt {
					cancel()
				}
				if calls <= len(tc.fail) {
					return 0, tc.fail[calls-1]
				}
				return calls, nil
			})
			if calls != tc.wantCalls {
				t.Errorf("calls = %d, want %d", calls, tc.wantCalls)
			}
			if tc.wantErr == nil {
				if err != nil || v != tc.wantCalls {
					t.Errorf("RetryOp = %d, %v, want %d, nil", v, err, tc.wantCalls)
				}
			} else if !errors.Is(err, tc.wantErr) {
				t.Errorf("RetryOp error = %v, want %v", err, tc.wantErr)
			}
		})
	}
}

func TestRetryOpEndedContextCallsNothing(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := RetryOp(ctx, Backoff{Initial: time.Millisecond}, nil, nil, func(context.Context) (int, error) {
		t.Fatal("op called with an ended context")
		return 0, nil
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("RetryOp with an ended context: %v, want %v", err, context.Canceled)
	}
}
