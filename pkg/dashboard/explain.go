package dashboard

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/receiptflow/receiptflow/pkg/explain"
	"github.com/receiptflow/receiptflow/pkg/window"
)

// Explainer explains window id of generation gen (pkg/explain: the same
// code as receiptctl explain). It needs the deployment's Redis, so a
// dashboard without one has none.
type Explainer func(ctx context.Context, gen, id string) (*explain.Explanation, error)

// explainTimeout bounds one explanation (it reads LATE and REJECTED).
const explainTimeout = 20 * time.Second

// serveExplain is GET /api/explain/{id}: why window id holds its number,
// for the page's drawer. 400 for a malformed id, 404 for an unknown or
// pruned window, 409 when the records disagree, 503 without an Explainer;
// errors are {"error": "..."}.
// noExplain is why a dashboard without the deployment's Redis explains nothing.
const noExplain = "explanations need the deployment's Redis: start the dashboard with --redis-url, or use receiptctl explain"

// serveExplainInfo says whether this dashboard can explain windows, so the
// page does not ask one that cannot.
func (s *Service) serveExplainInfo(w http.ResponseWriter, _ *http.Request) {
	info := map[string]any{"available": s.cfg.Explain != nil}
	if s.cfg.Explain == nil {
		info["reason"] = noExplain
	}
	writeJSON(w, http.StatusOK, info)
}

func (s *Service) serveExplain(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if _, err := window.ParseID(id); err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "not a window id like 2026-12-02T10: " + id})
		return
	}
	if s.cfg.Explain == nil {
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"error": noExplain})
		return
	}
	s.st.mu.Lock()
	gen := s.st.generation
	s.st.mu.Unlock()
	if gen == "" {
		gen = s.cfg.Generation
	}
	ctx, cancel := context.WithTimeout(r.Context(), explainTimeout)
	defer cancel()
	e, err := s.cfg.Explain(ctx, gen, id)
	switch {
	case err == nil:
		writeJSON(w, http.StatusOK, e)
	case errors.Is(err, explain.ErrUnknownWindow):
		writeJSON(w, http.StatusNotFound, map[string]string{"error": err.Error()})
	case errors.Is(err, explain.ErrInconsistent):
		writeJSON(w, http.StatusConflict, map[string]string{"error": err.Error()})
	default:
		writeJSON(w, http.StatusBadGateway, map[string]string{"error": err.Error()})
	}
}
