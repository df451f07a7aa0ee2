package validator

// Claims that Redis lost (a replica promoted before it had the primary's
// last writes, a restore, a FLUSHALL): the validator notices that its claim
// progress went back, claims the lost RAW range again from RAW before any
// later copy is judged, and counts each regression in a metric
// (docs/recovery.md, "Redis lost acknowledged writes").

import (
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/receiptflow/receiptflow/pkg/contract"
	"github.com/receiptflow/receiptflow/pkg/ledger"
	"github.com/receiptflow/receiptflow/pkg/testenv"
)

// loseClaims deletes every claim and the claim progress, as a Redis that
// came back without them would hold. On a cluster one master loses all
// it holds: one that holds claims but not the key a single Redis keeps
// the progress under.
func (e *conflictEnv) loseClaims() {
	e.t.Helper()
	if e.cluster != nil {
		progress := e.cluster.NodeOf(e.t, ledger.Keys{Prefix: e.names.RedisPrefix()}.ClaimProgress())
		for _, node := range e.cluster.Nodes {
			if node == progress {
				continue
			}
			direct := redis.NewClient(&redis.Options{Addr: node.Addr(), Protocol: 2, DisableIdentity: true})
			defer direct.Close()
			n, err := direct.DBSize(e.ctx).Result()
			if err != nil {
				e.t.Fatal(err)
			}
			if n == 0 {
				continue
			}
			if err := direct.FlushAll(e.ctx).Err(); err != nil {
				e.t.Fatal(err)
			}
			e.t.Logf("master %s lost its %d keys", node.Addr(), n)
			return
		}
		e.t.Fatal("no master with claims to lose")
	}
	keys, err := e.rdb.Keys(e.ctx, e.names.RedisPrefix()+"*claims*").Result()
	if err != nil {
		e.t.Fatal(err)
	}
	if len(keys) == 0 {
		e.t.Fatal("no claims to lose")
	}
	if err := e.rdb.Del(e.ctx, keys...).Err(); err != nil {
		e.t.Fatal(err)
	}
}

// TestLostClaimsAreRebuiltBeforeALaterCopyIsJudged: every first copy is
// claimed and acknowledged, then Redis loses the claims while the
// validator runs. Copies with other content sent afterwards (in other
// partitions) must still be conflicting_duplicate: the validator finds its
// progress behind what it acknowledged, claims RAW again, and says so in
// receiptflow_validator_state_regressions_total. On an idle pipeline too:
// the claims come back before any later copy arrives.
func TestLostClaimsAreRebuiltBeforeALaterCopyIsJudged(t *testing.T) {
	for _, idle := range []bool{true, false} {
		t.Run(fmt.Sprintf("idle=%v", idle), func(t *testing.T) {
			conflictBackendsOn(t, []string{"miniredis", "redis-server", "redis-cluster"}, 0, func(t *testing.T, e *conflictEnv) {
				reg := prometheus.NewRegistry()
				e.startWith(reg)
				const ids = 40
				first := map[int]uint64{}
				last := map[int]uint64{}
				for i := 0; i < ids; i++ {
					id := "lost-" + strconv.Itoa(i)
					p := i % conflictParts
					seq, _ := e.publish(p, id+":a", event(t, id, p, 1))
					first[i], last[p] = seq, seq
				}
				for p, seq := range last {
					e.acked(p, seq)
				}
				e.loseClaims()
				regressions := func() float64 {
					return testenv.CounterSum(t, reg, "receiptflow_validator_state_regressions_total")
				}
				if idle {
					// Nothing new arrives: the periodic check finds the loss.
					testenv.CheckFor(t, 30*time.Second, 20*time.Millisecond, func() error {
						if n := regressions(); n < 1 {
							return fmt.Errorf("%v regressions seen", n)
						}
						return nil
					})
				}
				later := map[int]uint64{}
				for i := 0; i < ids; i++ {
					id := "lost-" + strconv.Itoa(i)
					p := (i + 1) % conflictParts
					later[i], _ = e.publish(p, id+":b", event(t, id, p, 2))
				}
				got := e.outcomes(2 * ids)
				for i := 0; i < ids; i++ {
					wantOutcome(t, got, first[i], "valid")
					wantOutcome(t, got, later[i], string(contract.ReasonConflictingDuplicate))
				}
				if n := regressions(); n < 1 {
					t.Errorf("receiptflow_validator_state_regressions_total is %v, want at least 1", n)
				}
			})
		})
	}
}
