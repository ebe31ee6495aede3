// The login form: posts the key as JSON with the form's CSRF token, then goes where the
// answer's `next` says (a path of this site, checked by the server).
const form = document.getElementById("login");
const problem = document.getElementById("login-error");

form.addEventListener("submit", async (event) => {
  event.preventDefault();
  const response = await fetch("/login", {
    method: "POST",
    headers: { "content-type": "application/json", "x-csrf-token": form.dataset.csrf },
    body: JSON.stringify({ key: form.key.value, next: form.dataset.next }),
  });
  if (response.ok) {
    window.location.assign((await response.json()).next);
    return;
  }
  const body = await response.json().catch(() => ({}));
  const detail = Array.isArray(body.detail) ? body.detail[0].msg : null;
  problem.textContent = response.status === 401 || !detail ? "That key is not valid." : detail;
  problem.hidden = false;
});
