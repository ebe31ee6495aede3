// A logged-in dashboard: the header's "Log out" ends the server-side session (a write, so
// it carries the session's CSRF token, as every write of the pages does: common.js).
import { csrfHeaders } from "./common.js";

document.getElementById("logout").addEventListener("click", async () => {
  const response = await fetch("/logout", { method: "POST", headers: csrfHeaders() });
  const body = await response.json().catch(() => ({}));
  window.location.assign(body.next || "/login");
});
