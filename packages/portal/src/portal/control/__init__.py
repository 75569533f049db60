"""Portal's embedded control plane: jobs, attempts, events, and the lost-job rules."""
