// A login link may carry the token in its fragment (/ui/login#token=...): fragments never reach a
// server or its logs. Fill the form, forget the fragment, log in.
"use strict";
document.addEventListener("DOMContentLoaded", () => {
  const match = location.hash.match(/^#token=([^&]+)/);
  if (!match) return;
  history.replaceState(null, "", location.pathname + location.search);
  document.getElementById("token").value = decodeURIComponent(match[1]);
  document.getElementById("login-form").submit();
});
