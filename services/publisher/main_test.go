package main

import (
	"os"
	"testing"

	"github.com/receiptflow/receiptflow/pkg/testenv"
)

func TestMain(m *testing.M) {
	testenv.RunMainIfChild(main)
	os.Exit(m.Run())
}

func TestFlags(t *testing.T) { testenv.CheckServiceFlags(t, "publisher") }

func TestServesAndStopsOnSIGTERM(t *testing.T) { testenv.CheckServiceLifecycle(t, "publisher") }
