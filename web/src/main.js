// Placeholder entry point (the web-app branch replaces it): shows that the bundle ran.
const app = document.getElementById('app');
if (app) app.textContent = 'blz';
