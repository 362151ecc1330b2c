import { post, del, listAll } from './client';
import type { Image } from './types';

const i = (id: string) => `/images/${encodeURIComponent(id)}`;
export const listImages = (state?: string) => listAll<Image>('/images', { state });
export const deleteImage = (id: string) => del<void>(i(id));
export const restoreImage = (id: string) => post<Image>(`${i(id)}/restore`);
