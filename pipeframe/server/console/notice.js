// The one-line notice under the header: what an action did, or why it failed.

export function notify(text, isError = false) {
  const notice = document.getElementById("notice");
  notice.textContent = text;
  notice.className = isError ? "error" : "ok";
  notice.hidden = false;
}

export function clearNotice() {
  document.getElementById("notice").hidden = true;
}
