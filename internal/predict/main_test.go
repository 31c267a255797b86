package predict_test

import (
	"testing"

	"github.com/actloop/actloop/internal/testkit"
)

func TestMain(m *testing.M) { testkit.VerifyNoLeaks(m) }
