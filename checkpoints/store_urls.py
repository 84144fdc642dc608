from django.urls import path

from checkpoints import store_api

urlpatterns = [
    path("store/items", store_api.StoreItemView.as_view(), name="store-items"),
    path("store/items/search", store_api.StoreItemSearchView.as_view(), name="store-item-search"),
    path("store/namespaces", store_api.StoreNamespaceListView.as_view(), name="store-namespaces"),
]
