import { render } from 'preact';
import { App } from './app';
import { checkSession } from './session';
import { lang, setLang } from './i18n';
import './style.css';

setLang(lang.value);
checkSession();
render(<App />, document.getElementById('app')!);
