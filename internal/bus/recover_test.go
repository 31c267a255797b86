package bus

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
)

// A panic becomes an error of that message, with the value and the stack;
// it is never mistaken for an outcome the panic's value names.
func TestRecover(t *testing.T) {
	tests := []struct {
		name     string
		h        Handler
		wantErr  error
		wantText string
	}{
		{name: "no panic", h: returning(nil)},
		{name: "error passes", h: returning(errTransient), wantErr: errTransient},
		{name: "panic with a string", h: func(context.Context, jetstream.Msg) error { panic("boom") },
			wantErr: ErrPanic, wantText: "boom"},
		{name: "panic with an error", h: func(context.Context, jetstream.Msg) error { panic(errTransient) },
			wantErr: ErrPanic, wantText: errTransient.Error()},
		{name: "panic with a malformed error stays a panic", h: func(context.Context, jetstream.Msg) error {
			panic(Malformed(errors.New("bad")))
		}, wantErr: ErrPanic, wantText: "bad"},
		{name: "nil dereference", h: func(context.Context, jetstream.Msg) error {
			var p *int
			return fmt.Errorf("%d", *p)
		}, wantErr: ErrPanic, wantText: "nil pointer"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := Recover()(tt.h)(context.Background(), newFakeMsg(1))
			if !errors.Is(err, tt.wantErr) || (err == nil) != (tt.wantErr == nil) {
				t.Fatalf("returned %v, want %v", err, tt.wantErr)
			}
			if err == nil {
				return
			}
			if !strings.Contains(err.Error(), tt.wantText) {
				t.Errorf("error %q does not name %q", err, tt.wantText)
			}
			if errors.Is(tt.wantErr, ErrPanic) && (!strings.Contains(err.Error(), "recover_test.go") || IsMalformed(err) || IsFatal(err)) {
				t.Errorf("error %q: want the stack, and neither malformed nor fatal", err)
			}
		})
	}
}
