package readrecovery_test

import (
	"testing"

	"github.com/readrecovery/readrecovery"
	"github.com/readrecovery/readrecovery/scopestoretest"
)

// The merge rule's step table, at fixed times, through the one function
// every store uses (the stores run it through Exchange: scopestoretest).
func TestMergeCard(t *testing.T) {
	for _, tc := range scopestoretest.MergeCases() {
		t.Run(tc.Name, func(t *testing.T) {
			if got := readrecovery.MergeCard(readrecovery.ScopeCard{}, tc.Stored); got != tc.Stored {
				t.Fatalf("mergeCard(zero, stored) = %+v, want stored %+v", got, tc.Stored)
			}
			if got := readrecovery.MergeCard(tc.Stored, tc.In); got != tc.Want {
				t.Fatalf("mergeCard(%+v, %+v) = %+v, want %+v", tc.Stored, tc.In, got, tc.Want)
			}
		})
	}
}
