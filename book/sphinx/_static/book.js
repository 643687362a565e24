// The sidebar buttons. The themes attach their handlers to the first .primary-toggle and
// .secondary-toggle of the page, which is the header's and hidden in this book's layout; the
// buttons a reader sees (the article header's) pass their clicks on to it.
document.addEventListener("DOMContentLoaded", () => {
  for (const kind of ["primary-toggle", "secondary-toggle"]) {
    const [handled, ...shown] = document.querySelectorAll(`button.${kind}`);
    for (const button of shown) {
      button.addEventListener("click", (event) => {
        event.preventDefault();
        event.stopPropagation();
        handled.click();
      });
    }
  }
});
