"""Re-audits as records: `POST /reaudit` starts one, `GET /reaudits/{id}` polls it and serves its diff."""
